"""The roofline: how fast a chip can go, given how many FLOPs it does per byte it reads.

A kernel that does `I` FLOPs per byte loaded (its arithmetic intensity) runs at most at
min(peak_flops, bandwidth * I). Decode is a matrix-vector product (I ~ 1 FLOP/byte in
fp16), so it sits on the bandwidth slope; prefill is a matrix-matrix product and can
reach the compute ceiling. This module holds the chip side: presets, intensity formulas,
and numpy measurements of the machine you are on.
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass

import numpy as np

from . import validate
from .config import check_config
from .flops import attention_flops

MiB = 2**20
REPORTED = ("the total nvidia-smi prints, references.bib: thundergolfer2025gpumemory and "
            "modal2025gpumemory")
LECTURE_SOURCE = ("source_lecture_memory_bound (references.bib), the lecture on why decode is "
                  "memory-bound: assumed round numbers")


@dataclass(frozen=True)
class Hardware:
    """A chip as the roofline sees it: peak FLOP/s, memory bandwidth in bytes/s, memory size.

    memory_bytes is the memory in bytes, or None: for a GPU, the total its driver reports
    (NVML, as nvidia-smi prints it, in MiB), which is neither the "80 GB" of its name read in
    decimal nor always that many GiB: an A100 80GB reports 81,920 MiB (80 GiB), an H100 80GB
    81,559 MiB (79.6 GiB; chapter 4). toykv's chapters and self-checks size batches with it.
    """

    name: str
    peak_flops: float
    bandwidth: float
    memory_bytes: float | None = None
    source: str = ""
    note: str = ""

    def __post_init__(self):
        for field in ("peak_flops", "bandwidth"):
            validate.number(field, getattr(self, field))
        if self.memory_bytes is not None:
            validate.number("memory_bytes", self.memory_bytes)

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte at the corner of the roofline: below it a kernel is memory-bound."""
        return self.peak_flops / self.bandwidth

    def attainable_flops(self, intensity):
        """Roofline ceiling at `intensity` FLOP/byte: min(peak, bandwidth * intensity)."""
        intensity = np.asarray(intensity, dtype=float)
        if np.any(~(intensity >= 0)):
            raise ValueError(f"intensity must be >= 0 FLOP/byte, got {intensity}")
        ceiling = np.minimum(self.peak_flops, self.bandwidth * intensity)
        return float(ceiling) if ceiling.ndim == 0 else ceiling

    def min_seconds(self, flops: float, nbytes: float) -> float:
        """Lower bound on a step's time: the slower of doing its FLOPs and moving its bytes."""
        validate.number("flops", flops, allow_minimum=True)
        validate.number("nbytes", nbytes, allow_minimum=True)
        return max(flops / self.peak_flops, nbytes / self.bandwidth)

    def serial_min_seconds(self, *parts) -> float:
        """Lower bound on a step whose parts run one after another, none overlapping the next:
        the sum of each part's min_seconds (parts: (flops, nbytes) pairs). With a decode step's
        cache and weights as the parts this is austin2025scaling's step-time model; min_seconds
        of the whole step instead assumes the parts overlap perfectly."""
        if not parts:
            raise ValueError("serial_min_seconds needs at least one (flops, nbytes) part")
        for part in parts:
            if not (isinstance(part, (tuple, list)) and len(part) == 2):
                raise ValueError(f"each part must be a (flops, nbytes) pair, got {part!r}")
        return sum(self.min_seconds(flops, nbytes) for flops, nbytes in parts)

    def critical_batch(self, bytes_per_param=2) -> float:
        """Batch from which a decode step's weight products are compute-bound: B sequences do
        2 B FLOPs per weight of bytes_per_param bytes, reaching the ridge point at
        B = ridge_point x bytes_per_param / 2 (the ridge itself in bf16, half of it in int8)."""
        validate.number("bytes_per_param", bytes_per_param)
        return self.ridge_point * bytes_per_param / 2

    def measured_point(self, flops: float, nbytes: float, seconds: float) -> dict:
        """Where a measured run of `flops` FLOPs moving `nbytes` bytes in `seconds` sits on this
        roofline: {'intensity': FLOP/byte, 'flops_per_s', 'bytes_per_s', 'roof': the attainable
        FLOP/s at that intensity, 'fraction': flops_per_s / roof, 'limit': 'memory' below the
        ridge point, else 'compute'}. For a memory-bound run the fraction equals bytes_per_s /
        bandwidth: the share of its bandwidth bound it attained."""
        flops = validate.number("flops", flops)
        nbytes = validate.number("nbytes", nbytes)
        seconds = validate.number("seconds", seconds)
        intensity = flops / nbytes
        roof = self.attainable_flops(intensity)
        return {"intensity": intensity, "flops_per_s": flops / seconds,
                "bytes_per_s": nbytes / seconds, "roof": roof,
                "fraction": flops / seconds / roof,
                "limit": "memory" if intensity < self.ridge_point else "compute"}


GiB = 2**30

# Dense (no 2:4 sparsity) BF16 tensor-core peaks and memory bandwidth, from each vendor's
# document. The figures were checked against quotations of those documents found with a
# search tool, not against the vendor PDFs themselves; the note says where that is weaker.
HARDWARE = {
    "lecture": Hardware(
        "lecture accelerator (assumed)", peak_flops=200e12, bandwidth=1e12,
        source=LECTURE_SOURCE,
        note="Round numbers assumed by the lecture (200 TFLOP/s fp16, 1 TB/s); not a real chip."),
    "a100-80gb-sxm": Hardware(
        "NVIDIA A100 80GB SXM", peak_flops=312e12, bandwidth=2039e9,
        memory_bytes=81_920 * MiB,
        source="NVIDIA A100 Tensor Core GPU datasheet",
        note="BF16 tensor core 312 TFLOP/s dense (624 with sparsity); HBM2e 2,039 GB/s. "
             "Memory: reports 81,920 MiB, exactly 80 GiB (" + REPORTED + ")."),
    "h100-sxm": Hardware(
        "NVIDIA H100 SXM", peak_flops=1979e12 / 2, bandwidth=3.35e12,
        memory_bytes=81_559 * MiB,
        source="NVIDIA H100 Tensor Core GPU datasheet",
        note="Datasheet lists BF16 1,979 TFLOP/s with sparsity; dense is half. HBM3 3.35 TB/s. "
             "Memory: sold as 80GB, reports 81,559 MiB, 79.6 GiB (" + REPORTED + ")."),
    "l4": Hardware(
        "NVIDIA L4", peak_flops=242e12 / 2, bandwidth=300e9, memory_bytes=23_034 * MiB,
        source="NVIDIA L4 Tensor Core GPU datasheet",
        note="Datasheet lists 242 TFLOP/s with sparsity; dense is half. GDDR6 300 GB/s. "
             "Only the FP16 figure was seen quoted; BF16 runs at the FP16 rate on this chip. "
             "Memory: sold as 24GB, reports 23,034 MiB, 22.5 GiB (" + REPORTED + ")."),
    "mi300x": Hardware(
        "AMD Instinct MI300X", peak_flops=1307.4e12, bandwidth=5.3e12, memory_bytes=192 * GiB,
        source="AMD Instinct MI300X data sheet",
        note="BF16 1,307.4 TFLOP/s dense (2,614.9 with sparsity); HBM3 5.3 TB/s. Memory "
             "unverified: the data sheet's 192 GB taken as 192 GiB; no report of what the card "
             "itself gives was checked."),
    "rtx-4090": Hardware(
        "NVIDIA GeForce RTX 4090", peak_flops=165.2e12, bandwidth=1008e9,
        memory_bytes=24_564 * MiB,
        source="NVIDIA Ada GPU architecture whitepaper",
        note="Unverified: BF16 165.2 TFLOP/s dense with FP32 accumulate was checked only against "
             "third-party spec pages, not the whitepaper. GDDR6X 1,008 GB/s. "
             "Memory: sold as 24GB, reports 24,564 MiB (nvidia-smi output quoted in the "
             "GitHub issue RLinf/RLinf#255)."),
}


def hardware(name: str) -> Hardware:
    """The preset called `name` (a key of HARDWARE); an unknown name raises KeyError (a
    ValueError too, validate.UnknownName)."""
    if not isinstance(name, str) or name not in HARDWARE:
        raise validate.UnknownName(f"unknown hardware {name!r}; known: {sorted(HARDWARE)}")
    return HARDWARE[name]


# -- arithmetic intensity ------------------------------------------------------------

def matmul_flops(m: int, k: int, n: int) -> int:
    """FLOPs of C[m, n] = A[m, k] @ B[k, n]: one multiply and one add per term."""
    for name, value in (("m", m), ("k", k), ("n", n)):
        validate.count(name, value, 1)
    return 2 * m * k * n


def matmul_bytes(m: int, k: int, n: int, bytes_per_value: float = 2) -> float:
    """Bytes moved if A (m x k) and B (k x n) are read once and C (m x n) written once."""
    for name, value in (("m", m), ("k", k), ("n", n)):
        validate.count(name, value, 1)
    validate.number("bytes_per_value", bytes_per_value)
    return bytes_per_value * (m * k + k * n + m * n)


def arithmetic_intensity(m: int, k: int, n: int, bytes_per_value: float = 2) -> float:
    """FLOPs per byte of a matmul. m=1 (one token, decode) gives ~1 in fp16; m tokens give ~m."""
    return matmul_flops(m, k, n) / matmul_bytes(m, k, n, bytes_per_value)


def decode_intensity(params: int, batch: int = 1, bytes_per_param: float = 2,
                     kv_bytes: float = 0) -> float:
    """FLOPs per byte of one decode step for `batch` sequences sharing one read of the weights.

    Counts 2 FLOPs per parameter per sequence and the weight bytes plus `kv_bytes` (the whole
    batch's cache, read once). Attention FLOPs over the cache are left out, so this is a
    slight underestimate when kv_bytes > 0. With kv_bytes=0 it is 2 B / b_w (B = batch,
    b_w = bytes_per_param): 1 FLOP/byte for one sequence in fp16.
    """
    validate.count("params", params, 1)
    validate.count("batch", batch, 1)
    validate.number("bytes_per_param", bytes_per_param)
    validate.number("kv_bytes", kv_bytes, allow_minimum=True)
    return 2 * params * batch / (params * bytes_per_param + kv_bytes)


def attention_intensity(config, n_new: int, n_cached: int = 0, bytes_per_value=2) -> float:
    """FLOPs per byte of attention alone (flops.attention_flops: scores and weighted sums) when
    its queries and the keys and values it attends to are read once and its outputs written
    once, b = bytes_per_value each. About G = H / H_kv in decode (n_new=1: each key serves G
    query heads, so MHA does 1 in bf16); S G / (G + 1) in a prefill of S tokens (S / 2 for MHA),
    counting every score as toykv.flops does. MHA, GQA and MQA layers that cache their own K
    and V only."""
    config = check_config(config)
    n_new = validate.count("n_new", n_new, 1)
    n_cached = validate.count("n_cached", n_cached, 0)
    size = validate.number("bytes_per_value", bytes_per_value)
    if any(set(spec.entry_shapes) != {"k", "v"} for spec, _ in config.layer_groups):
        raise ValueError("attention_intensity counts MHA, GQA and MQA layers only, got "
                         f"attention={config.attention!r}, layers {sorted(config.layer_kinds)}"
                         + (f", kv_sharing={config.kv_sharing}" if config.kv_sharing > 1
                            else ""))
    values = 0
    for spec, n in config.layer_groups:
        keys = spec.mask_sizes(n_new, n_cached)[0]
        queries_and_outputs = 2 * n_new * spec.n_heads * spec.head_dim        # Q in, O out
        values += n * (queries_and_outputs + keys * spec.values_per_token)    # + K and V
    return attention_flops(config, n_new, n_cached) / (size * values)


# -- measuring this machine ------------------------------------------------------------

MAX_REPEATS = 1000      # the most repeats (and warmup calls) a measurement helper accepts


def timed_runs(fn, repeats: int = 5, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of `repeats` calls of fn(), after `warmup` untimed calls; both are
    at most MAX_REPEATS."""
    if not callable(fn):
        raise ValueError(f"fn must be a function to time, got {type(fn).__name__}")
    validate.count("repeats", repeats, 1, MAX_REPEATS)
    validate.count("warmup", warmup, 0, MAX_REPEATS)
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


BANDWIDTH_COLUMNS = 4096   # columns of the float32 matrix measure_bandwidth streams


def measure_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 5) -> float:
    """Memory read bandwidth in bytes/s, measured with the read a decode step does: best of
    `repeats` runs of x @ W, one float32 row x times a float32 matrix W of nbytes bytes,
    stored column-major as toykv's weights are (model.weight_layout).

    Counts nbytes (W is read once from memory; x and the result are one row each, at most
    BANDWIDTH_COLUMNS values). This is the matrix-vector product every projection of a
    batch-1 decode step runs, in the same dtype, so a measured decode point on the roofline
    it draws sits at or below the roof except by timing noise. Keep nbytes well above the
    last-level cache, or you measure cache. nbytes: a multiple of 4 (whole float32 values);
    repeats: at most MAX_REPEATS.
    """
    _check_bandwidth_args(nbytes, repeats)
    values = nbytes // 4
    cols = math.gcd(values, BANDWIDTH_COLUMNS)
    w = np.ones((values // cols, cols), np.float32, order="F")   # [rows, cols]; every page
    x = np.ones(values // cols, dtype=np.float32)           # [rows]
    out = np.empty(cols, dtype=np.float32)                  # [cols], reused: no allocation
    return nbytes / min(timed_runs(lambda: np.matmul(x, w, out=out), repeats))


def _check_bandwidth_args(nbytes, repeats):
    validate.count("nbytes", nbytes, 1)
    if nbytes % 4:
        raise ValueError(f"nbytes must be a multiple of 4 (whole float32 values), got {nbytes}")
    validate.fits_in_memory(f"measure_bandwidth(nbytes={nbytes})", nbytes,
                            "choose nbytes a few times the last-level cache, e.g. 256 MiB")
    validate.count("repeats", repeats, 1, MAX_REPEATS)


def _check_matmul_args(n, repeats, dtype) -> np.dtype:
    validate.count("n", n, 1)
    validate.count("repeats", repeats, 1, MAX_REPEATS)
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"dtype must be a floating-point type, got {dtype!r}") from None
    if dtype.kind != "f":
        raise ValueError(f"dtype must be a floating-point type, got {dtype}")
    # a, b, out of n x n values, plus the float64 random numbers a and b are made from
    validate.fits_in_memory(f"measure_matmul_peak(n={n})", n * n * (3 * dtype.itemsize + 8),
                            "n = 2048 is plenty to reach the matmul peak")
    return dtype


def measure_matmul_peak(n: int = 2048, repeats: int = 5, dtype=np.float32) -> float:
    """Matmul FLOP/s: best of `repeats` (at most MAX_REPEATS) timed np.matmul of two n x n
    matrices (2 n^3 FLOPs)."""
    dtype = _check_matmul_args(n, repeats, dtype)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)  # [n, n]
    b = rng.standard_normal((n, n)).astype(dtype)  # [n, n]
    out = np.empty((n, n), dtype=dtype)  # [n, n], reused so no allocation is timed
    return matmul_flops(n, n, n) / min(timed_runs(lambda: np.matmul(a, b, out=out), repeats))


def this_machine(nbytes: int = 256 * 2**20, n: int = 2048, repeats: int = 5) -> Hardware:
    """A Hardware for the machine running this code: measured matmul peak and bandwidth.
    Every argument is checked before either measurement starts."""
    _check_matmul_args(n, repeats, np.float32)
    _check_bandwidth_args(nbytes, repeats)
    peak = measure_matmul_peak(n=n, repeats=repeats)
    bandwidth = measure_bandwidth(nbytes=nbytes, repeats=repeats)
    cpu = describe_machine()["cpu"]
    return Hardware(
        f"this machine ({cpu})", peak_flops=peak, bandwidth=bandwidth,
        source="measured with numpy (toykv.roofline)",
        note=f"float32 matmul n={n} and float32 matrix-vector read of {nbytes} bytes, "
             f"best of {repeats}.")


def describe_machine() -> dict:
    """CPU model, core count, numpy version and BLAS library, to print beside measurements."""
    info = {"cpu": _cpu_model(), "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__, "blas": _blas_name()}
    try:  # optional: how many threads BLAS will use
        from threadpoolctl import threadpool_info
        info["blas_threads"] = [p.get("num_threads") for p in threadpool_info()
                                if p.get("user_api") == "blas"]
    except ImportError:
        pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _blas_name() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy has no mode="dicts"; the BLAS name is then unknown
        return "unknown"


__all__ = [
    "Hardware", "HARDWARE", "hardware", "matmul_flops", "matmul_bytes", "arithmetic_intensity",
    "decode_intensity", "attention_intensity", "timed_runs", "measure_bandwidth",
    "measure_matmul_peak", "this_machine", "describe_machine",
]
