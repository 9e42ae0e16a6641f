"""Published MLPerf Training results meshfit's step-time model is checked against (time-to-train ratios).

Each row compares two published results of one benchmark: two GPU generations at the same GPU count (or, where
the source states it that way, per GPU), or one generation at two scales.  `published` is the ratio the source
states or that follows from the two times it states (slower / faster).  The jobs are the benchmarks' models
(MLCommons reference sizes) with a stated parallelism; the parallelism of each submission is not published in
the sources, so it is an assumption of this table (docs/cost-model.md, "Calibration", says which).

Sources (read through the `pages` corpus of this project's search tool; the NVIDIA posts are the primary ones):
- NVIDIA technical blog, "NVIDIA Sets New Generative AI Performance and Scale Records in MLPerf Training v4.0"
  (June 2024) and NVIDIA blog "Scaling to New Heights" (D. Salvator): GPT-3 175B from 10.9 minutes on 3,584 H100
  (v3.0) to 3.4 minutes on 11,616 H100 (v4.0, Eos).
- EE Times via climateerinvest (June 2023), IEEE Spectrum: v3.0, NVIDIA + CoreWeave, 3,584 H100, 10.94 minutes.
- Engadget / dailyai (Nov 2023): v3.1, NVIDIA Eos, 10,752 H100, GPT-3 175B in 3.9 minutes.
- the-decoder.com and it-online.co.za (Nov 2024), reporting NVIDIA's v4.1 submission: Blackwell (B200) 2.2x the
  per-GPU performance of Hopper (H100) on Llama 2 70B LoRA fine-tuning and 2x on GPT-3 175B pre-training, the
  GPT-3 run on 64 B200 (Hopper needed 256).
- NVIDIA technical blog "NVIDIA Blackwell Delivers up to 2.6x Higher Performance in MLPerf Training v5.0"
  (June 2025), as summarised by blockchain.news/cashkrypto: GB200 NVL72 trains Llama 3.1 405B 2.2x faster than
  Hopper at the same scale; DGX B200 2.5x faster than DGX H100 on Llama 2 70B LoRA (8 GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.placement.jobs import ModelShape, Parallelism

GPT3 = dict(params=175e9, layers=96, hidden=12288, seq=2048)
"""GPT-3 175B as MLPerf's reference (96 layers, hidden 12,288, sequence 2,048)."""
LLAMA2_70B = dict(params=70e9, layers=80, hidden=8192, seq=8192)
"""Llama 2 70B as MLPerf's LoRA benchmark runs it (sequence 8,192)."""
LLAMA31_405B = dict(params=405e9, layers=126, hidden=16384, seq=8192)
"""Llama 3.1 405B (126 layers, hidden 16,384, sequence 8,192)."""
MICRO_BATCHES = 8
"""Assumed micro-batches per pipeline per step for the GPT-3 runs (global batch = 8 x dp)."""


@dataclass(frozen=True)
class Side:
    """One published result: generation, GPUs, parallelism, model."""

    generation: str
    gpus: int
    parallelism: Parallelism
    model: ModelShape


@dataclass(frozen=True)
class PublishedRatio:
    """Two published results of one benchmark and the time-to-train ratio the source gives (slow / fast)."""

    name: str
    benchmark: str
    source: str
    slow: Side
    fast: Side
    published: float
    per_gpu: bool = False
    """True when the source states a per-GPU speed-up of two runs at different GPU counts."""


def _gpt3(generation: str, gpus: int) -> Side:
    dp = gpus // 32
    return Side(generation, gpus, Parallelism(tp=4, pp=8, dp=dp), ModelShape(**GPT3, global_batch=MICRO_BATCHES * dp))


def _lora(generation: str) -> Side:
    return Side(generation, 8, Parallelism(tp=8), ModelShape(**LLAMA2_70B, global_batch=8))


def _llama405(generation: str) -> Side:
    return Side(generation, 512, Parallelism(tp=8, pp=8, dp=8), ModelShape(**LLAMA31_405B, global_batch=1152))


ROWS: tuple[PublishedRatio, ...] = (
    PublishedRatio("lora-b200-vs-h100-v4.1", "Llama 2 70B LoRA",
                   "MLPerf Training v4.1, NVIDIA, DGX B200 vs DGX H100, 8 GPUs: 2.2x per GPU (the-decoder.com, "
                   "it-online.co.za, Nov 2024)", _lora("h100-sxm"), _lora("b200"), 2.2),
    PublishedRatio("gpt3-b200-vs-h100-v4.1", "GPT-3 175B",
                   "MLPerf Training v4.1, NVIDIA, 64 B200 (DGX B200) vs 256 H100: 2.0x per GPU (the-decoder.com, "
                   "Nov 2024)", _gpt3("h100-sxm", 256), _gpt3("b200", 64), 2.0, per_gpu=True),
    PublishedRatio("lora-b200-vs-h100-v5.0", "Llama 2 70B LoRA",
                   "MLPerf Training v5.0, NVIDIA, DGX B200 vs DGX H100, 8 GPUs: 2.5x (NVIDIA technical blog, "
                   "June 2025)", _lora("h100-sxm"), _lora("b200"), 2.5),
    PublishedRatio("llama405b-gb200-vs-h100-v5.0", "Llama 3.1 405B",
                   "MLPerf Training v5.0, NVIDIA, GB200 NVL72 vs H100 at the same scale: 2.2x (NVIDIA technical "
                   "blog, June 2025; GPU count not stated there, modelled at 512)", _llama405("h100-sxm"),
                   _llama405("gb200"), 2.2),
    PublishedRatio("gpt3-h100-3584-vs-10752", "GPT-3 175B",
                   "MLPerf Training v3.0 NVIDIA + CoreWeave, 3,584 H100, 10.94 min (EE Times, June 2023) vs v3.1 "
                   "NVIDIA Eos, 10,752 H100, 3.9 min (Engadget, Nov 2023)", _gpt3("h100-sxm", 3584),
                   _gpt3("h100-sxm", 10752), 10.94 / 3.9),
    PublishedRatio("gpt3-h100-3584-vs-11616", "GPT-3 175B",
                   "MLPerf Training v3.0, 3,584 H100, 10.9 min vs v4.0 NVIDIA Eos, 11,616 H100, 3.4 min (NVIDIA "
                   "technical blog, June 2024)", _gpt3("h100-sxm", 3584), _gpt3("h100-sxm", 11616), 10.9 / 3.4),
)
"""Every calibration row (6 published data points, generations H100, B200 and GB200)."""
