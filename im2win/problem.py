"""Validate and normalise convolution arguments into a frozen `Problem`.

This is the first step of every call (validate -> plan -> launch) and the lowest layer of the
package: it reads only ``.shape`` and ``.dtype``, so NumPy and CuPy arrays go through the same
checks, before any allocation or kernel launch. Letters follow the project's spec
(``spec/im2win.md`` in its shared folder; docs/design.md): x (N, C, H, W), w (K, C/G, R, S),
y (N, K, P, Q); stride (sh, sw), dilation (dh, dw), padding (pt, pb, pl, pr). Checks run in the
order of the project's INPUTS.md (tests/test_inputs.py holds its rows): groups, padding, stride,
dilation, ranks, group divisibility, channel match, bias shape, kernel against padded input.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import numbers
from typing import NamedTuple

import ml_dtypes
import numpy as np

LAYOUTS = ("NCHW", "NHWC")
DTYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32),
          np.dtype(np.float64))

_X_LETTERS = {"NCHW": "(N, C, H, W)", "NHWC": "(N, H, W, C)"}
_W_LETTERS = {"NCHW": "(K, C/G, R, S)", "NHWC": "(K, R, S, C/G)"}
_PADDING_FORMS = ("an int, a pair (ph, pw), a pair of pairs ((top, bottom), (left, right)), "
                  "'valid' or 'same'")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One convolution, fully normalised: extents, hyper-parameters, dtype and layout."""

    layout: str
    dtype: np.dtype
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    G: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pb: int
    pl: int
    pr: int
    has_bias: bool

    @property
    def Hp(self) -> int:
        return self.H + self.pt + self.pb

    @property
    def Wp(self) -> int:
        return self.W + self.pl + self.pr

    @property
    def P(self) -> int:
        return (self.Hp - self.dh * (self.R - 1) - 1) // self.sh + 1

    @property
    def Q(self) -> int:
        return (self.Wp - self.dw * (self.S - 1) - 1) // self.sw + 1

    @property
    def Cg(self) -> int:
        """Channels per group, C/G."""
        return self.C // self.G

    @property
    def Kg(self) -> int:
        """Filters per group, K/G."""
        return self.K // self.G

    @property
    def reduction(self) -> int:
        """Length of one output's dot product, (C/G)*R*S."""
        return self.Cg * self.R * self.S

    @property
    def flops(self) -> int:
        """2*N*K*P*Q*(C/G)*R*S: the convolution's own work, whatever the algorithm does."""
        return 2 * self.N * self.K * self.P * self.Q * self.reduction

    @property
    def x_shape(self) -> tuple[int, ...]:
        return self._in_layout(self.N, self.C, self.H, self.W)

    @property
    def w_shape(self) -> tuple[int, ...]:
        return self._in_layout(self.K, self.Cg, self.R, self.S)

    @property
    def y_shape(self) -> tuple[int, ...]:
        return self._in_layout(self.N, self.K, self.P, self.Q)

    @property
    def x_win_shape(self) -> tuple[int, ...]:
        """(N, C, P, Wp*R) for NCHW, (N, P, Wp*R, C) for NHWC."""
        return self._in_layout(self.N, self.C, self.P, self.Wp * self.R)

    @property
    def w_win_shape(self) -> tuple[int, ...]:
        """(K, C/G, S*R) for NCHW, (K, S*R, C/G) for NHWC."""
        if self.layout == "NCHW":
            return (self.K, self.Cg, self.S * self.R)
        return (self.K, self.S * self.R, self.Cg)

    def _in_layout(self, a: int, b: int, c: int, d: int) -> tuple[int, ...]:
        """Order the NCHW-lettered extents (a, b, c, d) as the layout stores them."""
        return (a, b, c, d) if self.layout == "NCHW" else (a, c, d, b)


def check_layout(layout) -> str:
    """Return `layout` if it is "NCHW" or "NHWC"; raise otherwise."""
    if not isinstance(layout, str):
        raise TypeError(f"layout must be 'NCHW' or 'NHWC', got {layout!r} of type "
                        f"{type(layout).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
    return layout


def check_int(name: str, value, expected: str = "an int") -> int:
    """Return `value` as an int; bool, float and str raise TypeError (`name` must be
    `expected`)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be {expected}, got {value!r} of type "
                        f"{type(value).__name__}")
    return int(value)


def is_sequence(value) -> bool:
    """Whether `value` is a sequence of hyper-parameters: a tuple, a list, a range or any other
    sequence but a string, or an array of at least one dimension."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, collections.abc.Sequence) and not isinstance(value, (str, bytes))


def check_pair(name: str, value) -> tuple[int, int]:
    """Normalise an int or a length-2 sequence of ints to a pair (vertical, horizontal)."""
    if is_sequence(value):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or a pair of ints, got {value!r} "
                             f"of length {len(value)}")
        return check_int(name, value[0]), check_int(name, value[1])
    value = check_int(name, value, "an int or a pair of ints")
    return value, value


def check_groups(groups) -> int:
    """Return groups as a positive int; raise otherwise."""
    groups = check_int("groups", groups)
    if groups <= 0:
        raise ValueError(f"non-positive groups is not supported, got groups={groups}")
    return groups


def check_padding_form(padding) -> str | tuple[int, int, int, int]:
    """Return "same", or (pt, pb, pl, pr) for every other accepted form of `padding`."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            return "same"
        raise ValueError(f"padding string must be 'valid' or 'same', got {padding!r}")
    if is_sequence(padding):
        if len(padding) != 2:
            raise ValueError(f"padding must be {_PADDING_FORMS}; got {padding!r} "
                             f"of length {len(padding)}")
        nested = [is_sequence(p) for p in padding]
        if nested == [True, True]:
            (pt, pb), (pl, pr) = (check_pair("padding", p) for p in padding)
        elif nested == [False, False]:
            (pt, pl) = check_pair("padding", padding)
            pb, pr = pt, pl
        else:
            raise ValueError(f"padding must be {_PADDING_FORMS}; got {padding!r}")
    else:
        pt = pb = pl = pr = check_int("padding", padding, _PADDING_FORMS)
    if min(pt, pb, pl, pr) < 0:
        raise ValueError(f"negative padding is not supported, got padding={padding!r}")
    return (pt, pb, pl, pr)


def check_stride(stride) -> tuple[int, int]:
    """Return stride as a pair (sh, sw) of positive ints; raise otherwise."""
    sh, sw = check_pair("stride", stride)
    if sh <= 0 or sw <= 0:
        raise ValueError(f"non-positive stride is not supported, got stride={stride!r}")
    return sh, sw


def check_dilation(dilation) -> tuple[int, int]:
    """Return dilation as a pair (dh, dw) of positive ints; raise otherwise."""
    dh, dw = check_pair("dilation", dilation)
    if dh <= 0 or dw <= 0:
        raise ValueError(f"dilation should be greater than zero, got dilation={dilation!r}")
    return dh, dw


def check_dtype(name: str, dtype) -> np.dtype:
    """Return `dtype` if float16, bfloat16 (ml_dtypes), float32 or float64 (native byte order);
    raise TypeError otherwise."""
    dtype = np.dtype(dtype)
    if dtype not in DTYPES:
        raise TypeError(f"{name} has dtype {dtype}; supported dtypes are float16, bfloat16 "
                        f"(ml_dtypes.bfloat16), float32 and float64")
    return dtype


def check_input_shape(shape, layout: str) -> tuple[int, int, int, int]:
    """Check x is 4-D with non-empty H and W; return (N, C, H, W) whatever the layout."""
    if len(shape) != 4:
        raise ValueError(f"expected 4-D input {_X_LETTERS[layout]} for layout {layout!r}, "
                         f"got input of shape {tuple(shape)}")
    N, C, H, W = shape if layout == "NCHW" else (shape[0], shape[3], shape[1], shape[2])
    if H == 0 or W == 0:
        raise ValueError(f"expected non-zero H and W in input {_X_LETTERS[layout]}, "
                         f"got input of shape {tuple(shape)}")
    return N, C, H, W


def check_fits(Hp: int, Wp: int, R: int, S: int, dh: int, dw: int) -> None:
    """Raise unless the dilated R x S kernel fits in the padded Hp x Wp input."""
    eff_r, eff_s = dh * (R - 1) + 1, dw * (S - 1) + 1
    if eff_r > Hp or eff_s > Wp:
        raise ValueError(f"padded input size per channel is ({Hp} x {Wp}) but the dilated "
                         f"kernel size is ({eff_r} x {eff_s}); the kernel can't be greater "
                         f"than the padded input")


def same_padding(R: int, S: int, dh: int, dw: int) -> tuple[int, int, int, int]:
    """'same' padding: total d*(k-1) per axis, the odd extra at the bottom/right (as PyTorch)."""
    th, tw = dh * (R - 1), dw * (S - 1)
    return (th // 2, th - th // 2, tw // 2, tw - tw // 2)


def make_problem(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1,
                 layout="NCHW") -> Problem:
    """Check the arguments of a convolution and return its `Problem`.

    Args:
        x: anything with ``.shape`` and ``.dtype``: (N, C, H, W) or (N, H, W, C) by `layout`.
        w: filter, (K, C/G, R, S) or (K, R, S, C/G) by `layout`.
        bias: None or (K,).
        stride, padding, dilation, groups, layout: as in `im2win.conv2d`.

    Returns:
        The frozen `Problem`.

    Raises:
        TypeError: a hyper-parameter that is not an int, or an unsupported or mismatched dtype.
        ValueError: a bad value or shape (the message names the argument, what it got and what
            it expected).
    """
    layout = check_layout(layout)
    G = check_groups(groups)
    pad = check_padding_form(padding)
    sh, sw = check_stride(stride)
    if pad == "same" and (sh, sw) != (1, 1):
        raise ValueError(f"padding='same' is not supported for strided convolutions, got "
                         f"stride={stride!r}")
    dh, dw = check_dilation(dilation)

    N, C, H, W = check_input_shape(x.shape, layout)
    if len(w.shape) != 4:
        raise ValueError(f"expected 4-D weight {_W_LETTERS[layout]} for layout {layout!r}, "
                         f"got weight of shape {tuple(w.shape)}")
    dtype = check_dtype("input", x.dtype)
    if np.dtype(w.dtype) != dtype:
        raise TypeError(f"input and weight must have the same dtype, got input {dtype} and "
                        f"weight {np.dtype(w.dtype)}")
    K, Cg, R, S = w.shape if layout == "NCHW" else (w.shape[0], w.shape[3], w.shape[1],
                                                    w.shape[2])
    if K % G != 0 or G > K:
        raise ValueError(f"out_channels K must be divisible by groups and at least groups, got "
                         f"K={K} (weight of shape {tuple(w.shape)}) and groups={G}")
    if Cg * G != C:
        raise ValueError(f"given groups={G} and weight of shape {tuple(w.shape)}, expected "
                         f"input of shape {tuple(x.shape)} to have {Cg * G} channels, but got "
                         f"{C} channels instead")
    if R == 0 or S == 0:
        raise ValueError(f"expected a non-empty kernel, got weight of shape {tuple(w.shape)}")
    if bias is not None:
        if tuple(bias.shape) != (K,):
            raise ValueError(f"expected bias of shape ({K},), got bias of shape "
                             f"{tuple(bias.shape)}")
        if np.dtype(bias.dtype) != dtype:
            raise TypeError(f"input and bias must have the same dtype, got input {dtype} and "
                            f"bias {np.dtype(bias.dtype)}")

    pt, pb, pl, pr = same_padding(R, S, dh, dw) if pad == "same" else pad
    check_fits(H + pt + pb, W + pl + pr, R, S, dh, dw)
    prob = Problem(layout=layout, dtype=dtype, N=N, C=C, H=H, W=W, K=K, R=R, S=S, G=G,
                   sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pb=pb, pl=pl, pr=pr,
                   has_bias=bias is not None)
    if math.prod(prob.y_shape) * dtype.itemsize >= 2 ** 63:
        raise ValueError(f"the output would have shape {prob.y_shape}, more than 2**63 bytes "
                         f"(padding={padding!r}, stride={stride!r})")
    return prob


class Given(NamedTuple):
    """Stands for an array a backward pass does not take, only its shape (and dtype)."""

    shape: tuple
    dtype: np.dtype


def check_shape(name: str, shape) -> tuple[int, ...]:
    """Return `shape` as a tuple of 4 non-negative ints; raise otherwise."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__len__"):
        raise TypeError(f"{name} must be a sequence of 4 ints, got {shape!r}")
    if len(shape) != 4:
        raise ValueError(f"{name} must have 4 entries, got {tuple(shape)}")
    out = tuple(check_int(name, n) for n in shape)
    if min(out) < 0:
        raise ValueError(f"{name} must not have negative entries, got {out}")
    return out


def check_dy(dy, prob: Problem, other: str) -> None:
    """Raise unless dy has y's shape and the dtype of `other` (the problem's)."""
    if np.dtype(dy.dtype) != prob.dtype:
        raise TypeError(f"dy and {other} must have the same dtype, got dy "
                        f"{np.dtype(dy.dtype)} and {other} {prob.dtype}")
    if tuple(dy.shape) != prob.y_shape:
        raise ValueError(f"expected dy of shape {prob.y_shape} (the output's for layout "
                         f"{prob.layout!r}), got dy of shape {tuple(dy.shape)}")


def make_backward_data_problem(dy, w, x_shape, **kwargs) -> Problem:
    """The `Problem` of the convolution whose x-gradient is asked for: x of `x_shape` with
    dy's dtype, w, and `kwargs` as `make_problem` takes them; dy checked against it."""
    x_shape = check_shape("x_shape", x_shape)
    check_dtype("weight", w.dtype)              # x's dtype below is w's: name w if it fails
    prob = make_problem(Given(x_shape, np.dtype(w.dtype)), w, **kwargs)
    check_dy(dy, prob, "weight")
    return prob


def make_backward_filter_problem(x, dy, w_shape, **kwargs) -> Problem:
    """The `Problem` of the convolution whose w-gradient is asked for: x, w of `w_shape` with
    x's dtype, and `kwargs` as `make_problem` takes them; dy checked against it."""
    w_shape = check_shape("w_shape", w_shape)
    prob = make_problem(x, Given(w_shape, np.dtype(x.dtype)), **kwargs)
    check_dy(dy, prob, "x")
    return prob
