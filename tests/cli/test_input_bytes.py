"""Issue 26 item 1: bytes that are not UTF-8 never crash a command.

Every file-taking option of every command is fed random bytes, UTF-16 without a byte-order mark and a
valid file with one Latin-1 byte in it: each exits 2 with exactly one line naming the file, no traceback.
A UTF-16 file with a byte-order mark (what Windows editors save) is read like its UTF-8 twin.
"""

from __future__ import annotations

import json
import random
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import typer
from typer.testing import CliRunner

from scheduler.cli import app
from tests.builders import make_nodelist, write_objects

ROOT = Path(__file__).resolve().parents[2]
RUNNER = CliRunner()

BASE_TEXTS = {
    "job": (ROOT / "tests" / "fixtures" / "jobs" / "pytorchjob.yaml").read_text(encoding="utf-8"),
    "config": "profile: hgx-h100\n",
    "trace": "job_id,submit_time,duration_seconds,gpus\nj0,0,60,8\nj1,10,60,16\n",
    "candidate": (ROOT / "simulations" / "examples" / "hgx-h100-64-nonblocking.yaml").read_text(encoding="utf-8"),
    "kubeconfig": "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    "pem": "-----BEGIN CERTIFICATE-----\nMIIBdummy\n-----END CERTIFICATE-----\n",
    "token": "a-bearer-token-long-enough-1234\n",
    "annotations": 'meshfit.io/gang="ml/job"\n',
    "rank-table": '{"gang": "ml/job"}\n',
    "labels": '{"nvidia.com/gpu.clique": "a.1"}\n',
    "fabric": "fabrics: []\n",
    "pointer": "step-00000001\n",
}
"""Valid (or at least plain ASCII) contents per kind of input file; the bad variants are derived from them."""


@dataclass(frozen=True)
class Case:
    """One file-taking option: the kind of file it reads and the argv that feeds `bad` to it."""

    option: str
    kind: str
    argv: Callable[[dict[str, Path], Path], list[str]]
    needs_torch: bool = False


SERVE = ["serve", "--port", "0", "--grpc-port", "0"]
CASES = [
    Case("topology show --cluster", "cluster", lambda f, b: ["topology", "show", "--cluster", str(b)]),
    Case("topology show --config", "config", lambda f, b: ["topology", "show", "--cluster", str(f["cluster"]),
                                                           "--config", str(b)]),
    Case("topology export --cluster", "cluster", lambda f, b: ["topology", "export", "--cluster", str(b)]),
    Case("topology export --config", "config", lambda f, b: ["topology", "export", "--cluster", str(f["cluster"]),
                                                             "--config", str(b)]),
    Case("place --cluster", "cluster", lambda f, b: ["place", "--cluster", str(b), "--job", str(f["job"])]),
    Case("place --job", "job", lambda f, b: ["place", "--cluster", str(f["cluster"]), "--job", str(b)]),
    Case("place --config", "config", lambda f, b: ["place", "--cluster", str(f["cluster"]), "--job", str(f["job"]),
                                                   "--config", str(b)]),
    Case("render --job", "job", lambda f, b: ["render", "--job", str(b), "--placement", str(f["placement"])]),
    Case("render --placement", "placement", lambda f, b: ["render", "--job", str(f["job"]), "--placement", str(b)]),
    Case("run --cluster", "cluster", lambda f, b: ["run", "--cluster", str(b), "--job", str(f["job"])], True),
    Case("run --job", "job", lambda f, b: ["run", "--cluster", str(f["cluster"]), "--job", str(b)], True),
    Case("run --checkpoint-dir", "pointer", lambda f, b: ["run", "--cluster", str(f["cluster"]), "--job", str(f["job"]),
                                                          "--resume", "--checkpoint-dir", str(b.parent)], True),
    Case("simulate --cluster", "cluster", lambda f, b: ["simulate", "--cluster", str(b), "--trace", str(f["trace"])]),
    Case("simulate --trace", "trace", lambda f, b: ["simulate", "--cluster", str(f["cluster"]), "--trace", str(b)]),
    Case("plan --candidate", "candidate", lambda f, b: ["plan", "--candidate", str(b), "--synthetic", "4"]),
    Case("plan --trace", "trace", lambda f, b: ["plan", "--candidate", str(f["candidate"]), "--trace", str(b)]),
    Case("serve --cluster", "cluster", lambda f, b: [*SERVE, "--cluster", str(b)]),
    Case("serve --config", "config", lambda f, b: [*SERVE, "--cluster", str(f["cluster"]), "--config", str(b)]),
    Case("serve --kubeconfig", "kubeconfig", lambda f, b: [*SERVE, "--kubeconfig", str(b)]),
    Case("serve --tls-cert-file", "pem", lambda f, b: [*SERVE, "--cluster", str(f["cluster"]), "--tls-cert-file",
                                                       str(b), "--tls-private-key-file", str(f["pem"])]),
    Case("serve --tls-private-key-file", "pem", lambda f, b: [*SERVE, "--cluster", str(f["cluster"]),
                                                              "--tls-cert-file", str(f["pem"]),
                                                              "--tls-private-key-file", str(b)]),
    Case("serve --client-ca-file", "pem", lambda f, b: [*SERVE, "--cluster", str(f["cluster"]), "--tls-cert-file",
                                                        str(f["pem"]), "--tls-private-key-file", str(f["pem"]),
                                                        "--client-ca-file", str(b)]),
    Case("serve --verb-token-file", "token", lambda f, b: [*SERVE, "--cluster", str(f["cluster"]),
                                                           "--verb-token-file", str(b)]),
    Case("gangs --kubeconfig", "kubeconfig", lambda f, b: ["gangs", "--kubeconfig", str(b)]),
    Case("submit --job", "job", lambda f, b: ["submit", "--job", str(b), "--cluster", str(f["cluster"]),
                                              "--url", "http://127.0.0.1:9", "--wait", "0"]),
    Case("submit --cluster", "cluster", lambda f, b: ["submit", "--job", str(f["job"]), "--cluster", str(b),
                                                      "--url", "http://127.0.0.1:9", "--wait", "0"]),
    Case("launch --annotations-file", "annotations", lambda f, b: ["launch", "--annotations-file", str(b),
                                                                   "--print-env"]),
    Case("launch --rank-table", "rank-table", lambda f, b: ["launch", "--annotations-file", str(b.parent / "absent"),
                                                            "--rank-table", str(b), "--print-env"]),
    Case("launch --node-labels", "labels", lambda f, b: ["launch", "--node-labels", str(b), "--print-env"]),
    Case("launch --fabric-config", "fabric", lambda f, b: ["launch", "--fabric-config", str(b), "--print-env"]),
]
OUTPUT_ONLY = {"render --to", "cluster generate --to", "topology export --to", "simulate --out-dir", "plan --out-dir",
               "demo --picture"}
"""Path options that are written, never read."""


def latin1_variant(text: str) -> tuple[bytes, int]:
    """`text` with one Latin-1 byte (é, 0xe9) in the middle of a line, and that byte's offset."""
    offset = max(len(text.split("\n", 1)[0]) // 2, 1)
    return (text[:offset] + "\xe9" + text[offset:]).encode("latin-1"), offset


def random_bytes() -> bytes:
    """512 reproducible random bytes that are not UTF-8."""
    data = random.Random(26).randbytes(512)
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    return data


class _Served:
    """What the stubbed `serve_http` returns: a server that stopped at once."""

    def stop_signal(self) -> None:
        """No signal stopped it."""
        return None


def _serve_nothing(*args, **kwargs) -> _Served:
    """Stands in for `serve_http`: a server that stopped at once."""
    return _Served()


@pytest.fixture(autouse=True)
def no_serving(monkeypatch):
    """`meshfit serve` returns at once instead of serving when it accepts its input (exit 0: the test fails)."""
    from scheduler.service.ops import server

    monkeypatch.setattr(server, "serve_http", _serve_nothing)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A valid input file of every kind (the cluster, and a placement of the job on it, made by meshfit)."""
    folder = tmp_path_factory.mktemp("inputs")
    paths = {"cluster": write_objects(folder, make_nodelist("hgx-h100", nodes=16))}
    for kind, text in BASE_TEXTS.items():
        paths[kind] = folder / f"{kind}.txt"
        paths[kind].write_text(text, encoding="utf-8")
    placed = RUNNER.invoke(app, ["place", "--cluster", str(paths["cluster"]), "--job", str(paths["job"]),
                                 "-o", "json"])
    assert placed.exit_code == 0, placed.output
    paths["placement"] = folder / "placement.json"
    paths["placement"].write_text(placed.stdout, encoding="utf-8")
    return paths


def _base_text(files: dict[str, Path], kind: str) -> str:
    return files[kind].read_text(encoding="utf-8")


def _bad_file(tmp_path: Path, case: Case, content: bytes) -> Path:
    folder = tmp_path / "checkpoints" if case.kind == "pointer" else tmp_path
    folder.mkdir(exist_ok=True)
    bad = folder / ("latest" if case.kind == "pointer" else f"bad-{case.kind}.input")
    bad.write_bytes(content)
    return bad


def _one_line_naming(result, bad: Path) -> str:
    text = result.stdout + result.stderr
    assert result.exit_code == 2, text
    assert "Traceback" not in text and isinstance(result.exception, (SystemExit, type(None))), text
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert bad.name in lines[0], lines[0]
    return lines[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variant", ["random-bytes", "utf16-without-bom", "latin1-byte"])
@pytest.mark.parametrize("case", CASES, ids=[c.option for c in CASES])
def test_bytes_that_are_not_utf8_exit_2_with_one_line_naming_the_file(case, variant, files, tmp_path):
    if case.needs_torch:
        pytest.importorskip("torch")
    base = _base_text(files, case.kind)
    offset = None
    if variant == "random-bytes":
        content = random_bytes()
    elif variant == "utf16-without-bom":
        content = base.encode("utf-16-le")
    else:
        content, offset = latin1_variant(base)
    bad = _bad_file(tmp_path, case, content)
    line = _one_line_naming(RUNNER.invoke(app, case.argv(files, bad)), bad)
    if offset is not None:
        assert f"byte {offset} (line 1) is 0xe9" in line
    if variant == "utf16-without-bom":
        assert "NUL byte at byte 1" in line


def _path_options() -> set[str]:
    """`command --option` for every option of every command whose value is a path."""
    found: set[str] = set()

    def walk(command, words: list[str]) -> None:
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, [*words, name])
        if getattr(command, "commands", None) or command.callback is None:
            return
        hints = typing.get_type_hints(command.callback)
        for param in command.params:
            if "Path" in repr(hints.get(param.name)):
                found.add(" ".join([*words, param.opts[0]]))

    walk(typer.main.get_command(app), [])
    return found


def test_every_path_option_of_every_command_is_covered():
    assert _path_options() == {c.option for c in CASES} | OUTPUT_ONLY


UTF16_READABLE = [c for c in CASES if c.option in (
    "place --cluster", "place --job", "place --config", "topology show --config", "simulate --trace",
    "plan --candidate")]


@pytest.mark.parametrize("case", UTF16_READABLE, ids=[c.option for c in UTF16_READABLE])
def test_utf16_with_a_byte_order_mark_reads_like_its_utf8_twin(case, files, tmp_path):
    base = _base_text(files, case.kind)
    twin = _bad_file(tmp_path, case, base.encode("utf-8"))
    expected = RUNNER.invoke(app, [*case.argv(files, twin), "-o", "json"])
    for encoding in ("utf-16", "utf-16-be", "utf-8-sig"):
        marked = _bad_file(tmp_path, case, (base.encode(encoding) if encoding != "utf-16-be"
                                            else b"\xfe\xff" + base.encode(encoding)))
        result = RUNNER.invoke(app, [*case.argv(files, marked), "-o", "json"])
        assert result.exit_code == expected.exit_code == 0, result.output
        assert _without_timings(result.stdout) == _without_timings(expected.stdout)


def _without_timings(stdout: str) -> object:
    """The JSON document printed, minus wall-clock timings (which differ run to run)."""
    def scrub(value: object) -> object:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if "wall" not in k}
        return [scrub(v) for v in value] if isinstance(value, list) else value

    return scrub(json.loads(stdout))


@pytest.mark.parametrize("option", ["serve --kubeconfig", "gangs --kubeconfig", "serve --verb-token-file"])
def test_files_other_programs_read_must_be_utf8_even_with_a_byte_order_mark(option, files, tmp_path):
    case = next(c for c in CASES if c.option == option)
    bad = _bad_file(tmp_path, case, _base_text(files, case.kind).encode("utf-16"))
    assert "UTF-16 text (byte-order mark at byte 0); save the file as UTF-8" in \
        _one_line_naming(RUNNER.invoke(app, case.argv(files, bad)), bad)
