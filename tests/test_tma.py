"""The TMA im2col descriptor's fields, without a GPU (tools/tma_probe.py checks them on one)."""

import numpy as np
import pytest

from im2win.cuda import tma
from im2win.problem import make_problem


def problem(x_shape, w_shape, **kwargs):
    return make_problem(np.empty(x_shape, np.float16), np.empty(w_shape, np.float16),
                        layout="NHWC", **kwargs)


def test_the_descriptor_holds_the_convolution():
    prob = problem((3, 11, 10, 128), (8, 3, 2, 128), stride=2, dilation=2,
                   padding=((2, 0), (1, 3)))
    args = tma.im2col_args(prob, (11 * 10 * 128, 1, 10 * 128, 128), 64, 128)
    assert args.dims == (128, 10, 11, 3)
    assert args.strides == (256, 10 * 256, 11 * 10 * 256)
    assert args.lower == (-1, -2) and args.upper == (3 - 2, 0 - 4)
    assert args.element_strides == (1, 2, 2, 1) and (args.channels, args.pixels) == (64, 128)
    # q = (W + upper - lower - 1) / sw + 1: the TMA's output columns are the problem's
    assert (10 + args.upper[0] - args.lower[0] - 1) // 2 + 1 == prob.Q
    assert (11 + args.upper[1] - args.lower[1] - 1) // 2 + 1 == prob.P


def test_tap_coordinates_are_the_window_corner_of_the_first_pixel():
    prob = problem((2, 7, 9, 64), (4, 3, 3, 64), padding=1)
    assert tma.tap_coordinates(prob, 0, 0, 0, 0) == ((0, -1, -1, 0), (0, 0))
    n, p, q = 1, 2, 4
    pixel = (n * prob.P + p) * prob.Q + q
    assert tma.tap_coordinates(prob, pixel, 2, 1, 64) == ((64, q - 1, p - 1, n), (1, 2))


@pytest.mark.parametrize("why, make", [
    ("NHWC", lambda: tma.im2col_args(make_problem(np.empty((1, 8, 5, 5), np.float16),
                                                  np.empty((4, 8, 3, 3), np.float16)),
                                     (200, 25, 5, 1), 8, 16)),
    ("channels contiguous", lambda: tma.im2col_args(problem((1, 5, 5, 8), (4, 3, 3, 8)),
                                                    (400, 2, 80, 16), 8, 16)),
    ("multiple of 16 bytes", lambda: tma.im2col_args(problem((1, 5, 5, 4), (4, 3, 3, 4)),
                                                     (100, 1, 20, 4), 4, 16)),
    ("multiples of 16", lambda: tma.im2col_args(problem((1, 5, 5, 12), (4, 3, 3, 12)),
                                                (300, 1, 60, 12), 8, 16)),
    ("at most 256", lambda: tma.im2col_args(problem((1, 5, 5, 64), (4, 3, 3, 64)),
                                            (1600, 1, 320, 64), 64, 512)),
    ("corners", lambda: tma.im2col_args(problem((1, 5, 5, 64), (4, 3, 3, 64), padding=130),
                                        (1600, 1, 320, 64), 64, 64)),
])
def test_what_the_tma_cannot_copy_is_refused(why, make):
    with pytest.raises(ValueError, match=why):
        make()
