"""Hardware.measured_point: a measured run placed on a roofline, checked by hand arithmetic."""
import pytest

from toykv.roofline import Hardware

CHIP = Hardware("hand", peak_flops=100e9, bandwidth=10e9)      # ridge point 10 FLOP/byte


def test_a_memory_bound_run():
    # 1 GFLOP over 2 GB in 0.4 s: 0.5 FLOP/byte; roof 10e9 x 0.5 = 5 GFLOP/s; attained 2.5
    p = CHIP.measured_point(1e9, 2e9, 0.4)
    assert p["intensity"] == pytest.approx(0.5)
    assert p["flops_per_s"] == pytest.approx(2.5e9)
    assert p["bytes_per_s"] == pytest.approx(5e9)
    assert p["roof"] == pytest.approx(5e9)
    assert p["fraction"] == pytest.approx(0.5)
    assert p["limit"] == "memory"
    # for a memory-bound run the fraction is bytes/s over the bandwidth
    assert p["fraction"] == pytest.approx(p["bytes_per_s"] / CHIP.bandwidth)


def test_a_compute_bound_run():
    # 100 GFLOP over 1 GB in 2 s: 100 FLOP/byte, above the ridge; 50 of 100 GFLOP/s
    p = CHIP.measured_point(100e9, 1e9, 2.0)
    assert p["intensity"] == pytest.approx(100)
    assert p["roof"] == pytest.approx(100e9)
    assert p["fraction"] == pytest.approx(0.5)
    assert p["limit"] == "compute"


def test_at_the_ridge_point_the_run_counts_as_compute_bound():
    p = CHIP.measured_point(10e9, 1e9, 1.0)
    assert p["limit"] == "compute" and p["fraction"] == pytest.approx(0.1)


@pytest.mark.parametrize("args, name", [((0, 1e9, 1.0), "flops"), ((1e9, 0, 1.0), "nbytes"),
                                        ((1e9, 1e9, 0), "seconds"),
                                        ((1e9, 1e9, float("nan")), "seconds"),
                                        ((1e9, "1e9", 1.0), "nbytes")])
def test_bad_arguments_name_themselves(args, name):
    with pytest.raises(ValueError, match=name):
        CHIP.measured_point(*args)
