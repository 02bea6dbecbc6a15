"""Tests of toykv.roofline: presets, intensity formulas, the lecture's figures, measurements.

Measurements are only checked to be positive and finite: the machine is shared, so no
test depends on how fast it is.
"""
import math

import numpy as np
import pytest

from toykv import roofline as rf
from toykv.roofline import Hardware
from toykv.sizing import max_tokens_per_second

LECTURE = rf.hardware("lecture")


# -- presets -----------------------------------------------------------------------

def test_lecture_preset_matches_the_lecture():
    # source_lecture_memory_bound: 200 TFLOP/s fp16, 1 TB/s, ridge point 200 FLOP/byte
    assert LECTURE.peak_flops == 200e12
    assert LECTURE.bandwidth == 1e12
    assert LECTURE.ridge_point == pytest.approx(200)
    assert "assumed" in LECTURE.source + LECTURE.note


def test_every_preset_is_sourced_and_consistent():
    for key, chip in rf.HARDWARE.items():
        assert chip.source, key
        # the ceiling is reached exactly at the ridge point, and not below it
        assert chip.attainable_flops(chip.ridge_point) == pytest.approx(chip.peak_flops)
        assert chip.attainable_flops(chip.ridge_point / 2) == pytest.approx(chip.peak_flops / 2)


def test_datasheet_figures():
    # vendor datasheets: A100 80GB SXM 312 TFLOP/s BF16 dense, 2,039 GB/s;
    # H100 SXM 1,979 TFLOP/s BF16 with sparsity (dense = half), 3.35 TB/s
    a100, h100 = rf.hardware("a100-80gb-sxm"), rf.hardware("h100-sxm")
    assert (a100.peak_flops, a100.bandwidth) == (312e12, 2039e9)
    assert h100.peak_flops == pytest.approx(989.5e12)
    assert h100.bandwidth == 3.35e12


def test_unknown_hardware_lists_known_names():
    with pytest.raises(KeyError, match="lecture"):
        rf.hardware("tpu-v9000")


@pytest.mark.parametrize("field, value", [
    ("peak_flops", 0), ("peak_flops", -1.0), ("bandwidth", float("nan")),
    ("bandwidth", float("inf")), ("memory_bytes", 0), ("peak_flops", "1e12"),
])
def test_hardware_rejects_bad_fields(field, value):
    args = dict(name="x", peak_flops=1e12, bandwidth=1e11)
    args[field] = value
    with pytest.raises(ValueError, match=field):
        Hardware(**args)


# -- the roofline ------------------------------------------------------------------

def test_attainable_below_and_above_ridge():
    # below the ridge: the bandwidth slope; above: the compute ceiling
    assert LECTURE.attainable_flops(1) == pytest.approx(1e12)  # lecture: ~1 TFLOP/s
    assert LECTURE.attainable_flops(1) / LECTURE.peak_flops == pytest.approx(0.005)  # 0.5 %
    assert LECTURE.attainable_flops(50) == pytest.approx(LECTURE.bandwidth * 50)
    assert LECTURE.attainable_flops(1000) == LECTURE.peak_flops
    assert LECTURE.attainable_flops(0) == 0


def test_attainable_accepts_arrays():
    intensity = np.logspace(-1, 4, 11)
    ceiling = LECTURE.attainable_flops(intensity)
    assert ceiling.shape == intensity.shape
    assert np.all(np.diff(ceiling) >= 0)  # never decreasing
    assert np.all(ceiling <= LECTURE.peak_flops)
    for i, c in zip(intensity, ceiling):
        assert c == pytest.approx(LECTURE.attainable_flops(float(i)))


def test_attainable_rejects_negative_or_nan():
    for bad in (-1, [1, -0.5], float("nan")):
        with pytest.raises(ValueError, match="intensity"):
            LECTURE.attainable_flops(bad)


def test_min_seconds_is_the_slower_limit():
    # 14 GB of weights, 2 FLOPs per parameter (7e9 params): memory-bound on the lecture chip
    assert LECTURE.min_seconds(2 * 7e9, 14e9) == pytest.approx(14e9 / 1e12)
    assert LECTURE.min_seconds(400e12, 1.0) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="nbytes"):
        LECTURE.min_seconds(1.0, -1)


# -- arithmetic intensity ------------------------------------------------------------

def test_matmul_counts():
    m, k, n = 3, 5, 7
    assert rf.matmul_flops(m, k, n) == 2 * 3 * 5 * 7
    assert rf.matmul_bytes(m, k, n, bytes_per_value=4) == 4 * (15 + 35 + 21)
    # counting against an explicit product: one multiply and one add per term
    a, b = np.ones((m, k)), np.ones((k, n))
    assert rf.matmul_flops(m, k, n) == 2 * (a @ b).sum()


@pytest.mark.parametrize("d", [512, 4096, 8192])
def test_matrix_vector_is_about_one_flop_per_byte(d):
    # lecture: W (d x d) times x in fp16 is ~1 FLOP/byte; the x and y bytes make it d / (d + 2)
    intensity = rf.arithmetic_intensity(1, d, d, bytes_per_value=2)
    assert intensity == pytest.approx(d / (d + 2))
    assert abs(intensity - 1) < 2 / d


@pytest.mark.parametrize("m", [4, 16, 64])
def test_matrix_matrix_intensity_is_about_m_tokens(m):
    d = 8192
    intensity = rf.arithmetic_intensity(m, d, d, bytes_per_value=2)
    assert intensity == pytest.approx(m * d / (d + 2 * m))  # exact for k = n = d
    assert intensity < m
    assert intensity == pytest.approx(m, rel=2 * m / d)


def test_intensity_grows_with_tokens_and_falls_with_wider_values():
    values = [rf.arithmetic_intensity(m, 1024, 1024) for m in (1, 2, 8, 64, 512)]
    assert values == sorted(values)
    assert rf.arithmetic_intensity(8, 1024, 1024, bytes_per_value=4) == pytest.approx(
        rf.arithmetic_intensity(8, 1024, 1024, bytes_per_value=2) / 2)


def test_decode_intensity():
    # 2 FLOPs per parameter per sequence; fp16 weights shared by the batch
    assert rf.decode_intensity(7_000_000_000, batch=1) == pytest.approx(1.0)
    assert rf.decode_intensity(7_000_000_000, batch=16) == pytest.approx(16.0)
    assert rf.decode_intensity(1000, batch=1, bytes_per_param=1) == pytest.approx(2.0)
    # the private caches are not shared: with them, intensity stays below the batch size
    with_cache = rf.decode_intensity(7_000_000_000, batch=16, kv_bytes=16 * 2 * 2**30)
    assert with_cache == pytest.approx(2 * 7e9 * 16 / (14e9 + 32 * 2**30))
    assert with_cache < 16


@pytest.mark.parametrize("call, name", [
    (lambda: rf.matmul_flops(0, 2, 2), "m"),
    (lambda: rf.matmul_flops(2, 2.0, 2), "k"),
    (lambda: rf.matmul_bytes(2, 2, -1), "n"),
    (lambda: rf.arithmetic_intensity(2, 2, 2, bytes_per_value=0), "bytes_per_value"),
    (lambda: rf.decode_intensity(10, batch=0), "batch"),
    (lambda: rf.decode_intensity(10, kv_bytes=-1), "kv_bytes"),
    (lambda: rf.decode_intensity(True), "params"),
])
def test_intensity_rejects_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- tokens per second -------------------------------------------------------------

def test_tokens_per_second_lecture_examples():
    # lecture: 1 TB/s over 14 GB of fp16 weights ~ 71 tok/s; with the 2 GiB cache ~ 62
    weights = 7e9 * 2
    assert round(max_tokens_per_second(1e12, weights)) == 71
    assert round(max_tokens_per_second(1e12, weights + 2 * 2**30)) == 62


def test_tokens_per_second_scales_with_bandwidth_not_flops():
    base = max_tokens_per_second(1e12, 14e9)
    assert max_tokens_per_second(2e12, 14e9) == pytest.approx(2 * base)
    assert max_tokens_per_second(1e12, 7e9) == pytest.approx(2 * base)  # 8-bit weights
    for bad in [(0, 1e9), (1e12, 0), (1e12, -5)]:
        with pytest.raises(ValueError):
            max_tokens_per_second(*bad)


# -- measurements ------------------------------------------------------------------

def test_timed_runs_counts_calls():
    calls = []
    seconds = rf.timed_runs(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(seconds) == 3 and len(calls) == 5
    assert all(s >= 0 for s in seconds)


def test_measure_bandwidth_small_is_positive_and_finite():
    value = rf.measure_bandwidth(nbytes=2**20, repeats=2)
    assert isinstance(value, float) and value > 0 and math.isfinite(value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_measure_matmul_peak_small_is_positive_and_finite(dtype):
    value = rf.measure_matmul_peak(n=64, repeats=2, dtype=dtype)
    assert isinstance(value, float) and value > 0 and math.isfinite(value)


@pytest.mark.parametrize("call, name", [
    (lambda: rf.measure_bandwidth(nbytes=0), "nbytes"),
    (lambda: rf.measure_bandwidth(nbytes=-8), "nbytes"),
    (lambda: rf.measure_bandwidth(nbytes=1001), "nbytes"),
    (lambda: rf.measure_bandwidth(nbytes=1024.0), "nbytes"),
    (lambda: rf.measure_bandwidth(nbytes=1024, repeats=0), "repeats"),
    (lambda: rf.measure_matmul_peak(n=0), "n"),
    (lambda: rf.measure_matmul_peak(n=8, repeats=1.5), "repeats"),
    (lambda: rf.measure_matmul_peak(n=8, dtype=np.int32), "dtype"),
    (lambda: rf.timed_runs(lambda: None, repeats=1, warmup=-1), "warmup"),
    (lambda: rf.timed_runs(lambda: None, repeats=1, warmup=1.0), "warmup"),
    (lambda: rf.measure_bandwidth(nbytes=True), "nbytes"),
    (lambda: rf.measure_matmul_peak(n=8, dtype="no such type"), "dtype"),
])
def test_measurements_reject_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("call, name", [
    (lambda: rf.timed_runs(lambda: None, repeats=10**9), "repeats"),
    (lambda: rf.timed_runs(lambda: None, warmup=10**9), "warmup"),
    (lambda: rf.timed_runs("not a function"), "fn must be a function"),
    (lambda: rf.measure_bandwidth(nbytes=2**10, repeats=10**12), "repeats"),
    (lambda: rf.measure_matmul_peak(n=8, repeats=10**12), "repeats"),
    (lambda: rf.this_machine(repeats=10**9), "repeats"),
])
def test_absurd_repeat_counts_are_refused_before_any_work(call, name, monkeypatch):
    monkeypatch.setattr(rf.time, "perf_counter", lambda: pytest.fail("something was timed"))
    with pytest.raises(ValueError, match=name):
        call()


def test_the_repeat_bound_is_said():
    with pytest.raises(ValueError, match=r"repeats must be an integer in \[1, 1000\], got 1001"):
        rf.timed_runs(lambda: None, repeats=rf.MAX_REPEATS + 1)


@pytest.mark.parametrize("kwargs, name", [({"nbytes": 7}, "nbytes"), ({"nbytes": 2**60}, "nbytes"),
                                          ({"nbytes": 1.0e9}, "nbytes"), ({"n": 0}, "n"),
                                          ({"n": 10**7}, "measure_matmul_peak"),
                                          ({"repeats": 0}, "repeats")])
def test_this_machine_checks_every_argument_before_measuring(kwargs, name, monkeypatch):
    def measured(**kw):
        pytest.fail("this_machine measured before refusing its arguments")

    monkeypatch.setattr(rf, "measure_matmul_peak", measured)
    monkeypatch.setattr(rf, "measure_bandwidth", measured)
    with pytest.raises(ValueError, match=name):
        rf.this_machine(**kwargs)


def test_this_machine_builds_a_hardware():
    chip = rf.this_machine(nbytes=2**20, n=64, repeats=1)
    assert isinstance(chip, Hardware)
    assert chip.peak_flops > 0 and chip.bandwidth > 0 and chip.ridge_point > 0
    assert "measured" in chip.source


def test_describe_machine():
    info = rf.describe_machine()
    assert {"cpu", "cores", "numpy", "blas"} <= info.keys()
    assert info["numpy"] == np.__version__
    assert isinstance(info["cpu"], str) and info["cpu"]


@pytest.mark.parametrize("call", [
    lambda: rf.measure_bandwidth(nbytes=2**60),                    # an exbibyte
    lambda: rf.measure_matmul_peak(n=10**7),                       # 10^14 values per matrix
])
def test_measurements_larger_than_the_machine_are_refused_before_allocating(call):
    with pytest.raises(ValueError, match="more than this machine's"):
        call()


def test_numpy_integers_are_counts():
    assert rf.matmul_flops(np.int64(3), np.int32(5), np.int64(7)) == 210
    assert rf.measure_bandwidth(nbytes=np.int64(2**16), repeats=np.int64(1)) > 0


def test_presets_hold_the_memory_the_cards_report():
    # what nvidia-smi reports (thundergolfer2025gpumemory, modal2025gpumemory in references.bib),
    # not the name's "80 GB" read as GB or as GiB: chapter 4 says so, chapter 6 sizes with it
    MiB = 2**20
    assert rf.hardware("a100-80gb-sxm").memory_bytes == 81_920 * MiB == 80 * 2**30
    assert rf.hardware("h100-sxm").memory_bytes == 81_559 * MiB
    assert 79 * 2**30 < rf.hardware("h100-sxm").memory_bytes < 80 * 2**30 < 86e9
    assert rf.hardware("l4").memory_bytes == 23_034 * MiB
    assert all(hw.memory_bytes is None or hw.memory_bytes % MiB == 0
               for hw in rf.HARDWARE.values())


def test_measure_bandwidth_takes_whole_float32_values():
    # the read decode does: a float32 row times a float32 matrix; any whole number of values
    assert rf.measure_bandwidth(nbytes=2**20 + 4, repeats=1) > 0


def test_serial_min_seconds_adds_each_parts_bound():
    # part 1 compute-bound: 2e12 FLOPs at 200 TFLOP/s (10 ms) beat 1 GB at 1 TB/s (1 ms);
    # part 2 memory-bound: 0.5 TB at 1 TB/s (0.5 s) beat 1 TFLOP (5 ms)
    assert LECTURE.serial_min_seconds((2e12, 1e9), (1e12, 5e11)) == pytest.approx(0.51, rel=1e-12)
    assert LECTURE.serial_min_seconds((2e12, 1e9)) == LECTURE.min_seconds(2e12, 1e9)
    # one max over both parts together is never slower than one after the other
    assert LECTURE.min_seconds(3e12, 5.01e11) == pytest.approx(0.501, rel=1e-12)
    for bad in ((), ((1, 2, 3),), (5,)):
        with pytest.raises(ValueError, match="part"):
            LECTURE.serial_min_seconds(*bad)
    with pytest.raises(ValueError, match="flops"):
        LECTURE.serial_min_seconds((-1, 10))


def test_critical_batch_is_the_ridge_in_bf16_and_half_in_int8():
    h100 = rf.hardware("h100-sxm")
    assert LECTURE.critical_batch() == 200 and LECTURE.critical_batch(1) == 100
    assert h100.critical_batch(2) == pytest.approx(989.5 / 3.35, rel=1e-12)
    assert h100.critical_batch(1) == pytest.approx(989.5 / 3.35 / 2, rel=1e-12)
    with pytest.raises(ValueError, match="bytes_per_param"):
        LECTURE.critical_batch(0)


def test_attention_intensity_by_hand():
    from toykv import ModelConfig, zoo
    base = dict(vocab_size=64, d_model=64, n_layers=2, n_heads=8, d_ff=64, max_seq_len=8192)
    mha, gqa = ModelConfig(**base), ModelConfig(**base, n_kv_heads=2)      # G = 1 and 4
    S = 4096
    # decode: 4 H d_h S FLOPs over b (2 H d_h + 2 H_kv d_h S) bytes, per layer
    assert rf.attention_intensity(mha, 1, S - 1) == pytest.approx(S / (1 + S), rel=1e-12)
    assert rf.attention_intensity(gqa, 1, S - 1) == pytest.approx(4 * S / (4 + S), rel=1e-12)
    # prefill of S: 4 H d_h S^2 FLOPs over b (2 S H d_h + 2 S H_kv d_h): S/2 for MHA
    assert rf.attention_intensity(mha, S) == pytest.approx(S / 2, rel=1e-12)
    assert rf.attention_intensity(gqa, S) == pytest.approx(S * 4 / 5, rel=1e-12)
    assert rf.attention_intensity(mha, S, bytes_per_value=4) == pytest.approx(S / 4, rel=1e-12)
    assert 0.99 < rf.attention_intensity(zoo.get("llama-2-7b").config, 1, 4095) < 1
    mla = ModelConfig(**base, attention="mla", kv_lora_rank=16, rope_head_dim=4)
    with pytest.raises(ValueError, match="MHA, GQA and MQA"):
        rf.attention_intensity(mla, 1, 10)
    with pytest.raises(ValueError, match="n_new"):
        rf.attention_intensity(mha, 0)
