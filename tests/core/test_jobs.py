"""Job model: annotation parsing and gang validation give precise errors."""

from __future__ import annotations

import pytest

from scheduler.placement.jobs import Gang, JobSpecError, ModelShape, Parallelism, PodSlot, parse_rank_order


def make_gang(pods: int = 4, gpus: int = 2, par: str = "tp=2,pp=2,dp=2", order: str = "tp-cp-ep-dp-pp") -> Gang:
    """A gang of `pods` pods x `gpus` GPUs with the given parallelism."""
    return Gang("ns", "job", tuple(PodSlot(i, f"job-{i}", gpus) for i in range(pods)),
                Parallelism.parse(par), order)


@pytest.mark.parametrize("text,expected", [
    ("tp=8,cp=1,ep=1,pp=4,dp=16", Parallelism(8, 1, 1, 4, 16)),
    ("tp=2, dp=4", Parallelism(tp=2, dp=4)),
    ("", Parallelism()),
    ("TP=4;PP=2", Parallelism(tp=4, pp=2)),
], ids=["full", "spaces-defaults", "empty", "upper-semicolon"])
def test_parallelism_parse(text: str, expected: Parallelism) -> None:
    assert Parallelism.parse(text) == expected


@pytest.mark.parametrize("text,message", [
    ("tp=0", "positive integer"),
    ("tp=1.5", "positive integer"),
    ("tp=x", "positive integer"),
    ("zz=2", "unknown axis 'zz'"),
    ("tp", "expected key=value"),
    ("tp=8,dp=2,dp=3", "'dp' is given twice"),
    ("TP=8,tp=8", "'tp' is given twice"),
], ids=["zero", "fraction", "nan", "unknown-axis", "no-value", "repeated-axis", "repeated-any-case"])
def test_parallelism_parse_errors(text: str, message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        Parallelism.parse(text)


def test_model_shape_parse_and_micro_batches() -> None:
    shape = ModelShape.parse("params=70e9,layers=80,hidden=8192,seq=4096,micro-batch=2,global-batch=1024")
    assert (shape.params, shape.layers, shape.hidden, shape.micro_batch) == (70e9, 80, 8192, 2)
    assert shape.micro_batches(dp=16) == 32
    with pytest.raises(JobSpecError, match="unknown key 'bogus'"):
        ModelShape.parse("bogus=1")


@pytest.mark.parametrize("text,expected", [
    ("tp-cp-ep-dp-pp", ("tp", "cp", "ep", "dp", "pp")),
    ("tp-cp-ep-pp-dp", ("tp", "cp", "ep", "pp", "dp")),
    ("tp-dp-pp", ("tp", "dp", "pp", "cp", "ep")),
], ids=["megatron", "tp-pp-dp", "partial"])
def test_parse_rank_order(text: str, expected: tuple[str, ...]) -> None:
    assert parse_rank_order(text) == expected


@pytest.mark.parametrize("gang,message", [
    (make_gang(par="tp=2,pp=2,dp=4"), r"tp\*cp\*ep\*pp\*dp = 16 .* 4 pods x 2 GPUs = 8"),
    (make_gang(order="tp-dp-pp", par="tp=2,cp=2,dp=2"), "omits axis cp whose degree is 2"),
    (Gang("ns", "job", (PodSlot(0, "a", 2), PodSlot(1, "b", 4)), Parallelism(dp=6)), "different GPU counts"),
    (Gang("ns", "job", (PodSlot(0, "a", 2), PodSlot(2, "b", 2)), Parallelism(dp=4)), "indices must be 0..1"),
    (Gang("ns", "job", ()), "no pods"),
], ids=["world-size", "omitted-axis", "heterogeneous", "index-gap", "empty"])
def test_gang_validate_errors(gang: Gang, message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        gang.validate()


def test_valid_gang_and_pod_ranks() -> None:
    gang = make_gang()
    gang.validate()
    assert gang.world_size == 8
    assert list(gang.pod_ranks(2)) == [4, 5]


def test_a_repeated_model_key_is_an_error_too() -> None:
    with pytest.raises(JobSpecError, match="'layers' is given twice"):
        ModelShape.parse("params=7e9,layers=32,layers=80")
