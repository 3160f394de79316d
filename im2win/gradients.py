"""The two gradients of `conv2d` as forward convolutions, on whatever device `conv2d` runs.

Backward data (a transposed convolution) by phases: the rows h = a + sh*i of dx with one
remainder a < sh (and likewise the columns) receive only the taps r with (a + pt - r*dh) a
multiple of sh, which are every t-th tap (t = sh / gcd(sh, dh)); over i that is a forward
convolution of dy, stride 1, dilation dh / gcd(sh, dh), with those taps reversed, the filters'
K and C/G exchanged within each group, and dy's rows shifted (padding, or a view that starts
later) so that output row i lands on dx row a + sh*i. Each of the sh*sw phases writes its
strided view of dx (`out=`), so every element of dx is written once, by one rounded sum; a
phase with no tap is zero. Stride 1 is one phase: the whole filter, flipped.

Backward filter as one forward convolution per group: ``dw[k, c, r, s] = sum_{n,p,q}
dy[n, k, p, q] * xp[n, c, p*sh + r*dh, q*sw + s*dw]`` is the convolution of x seen as C/G
images of N channels (x's axes exchanged: a view) with dy seen as K/G filters of N channels
and P x Q taps, stride (dh, dw), dilation (sh, sw), padding (pt, pl) and at the bottom what
makes its output R x S; its output is dw's view with the axes exchanged back. The reduction
runs over N*P*Q and is computed once per element in a fixed order: the same bits every run.

Both read views of the caller's arrays (and backward data a re-ordered copy of the filter),
so the GPU runs them on the forward kernels; what memory those calls take is theirs (a strided
`out` goes through a buffer of its size, and float16/bfloat16 NCHW on Hopper through the
NHWC twin's copies).
"""

from __future__ import annotations

import functools
import math

from im2win.problem import Problem


def _phase(a: int, s: int, d: int, pad: int, taps: int, P: int, extent: int):
    """One axis of backward data's phase `a`: (the number of taps it takes and their slice of
    the filter axis, in the order the forward convolution reads them, last tap first; its
    dilation; dy's slice; the forward padding (lo, hi); output length); no taps where none
    reaches the phase, or only padding does (its output is then zero); None where the phase
    has no output row. The taps are every t-th from the first, so a slice (a view of w, no
    index array to copy to the device) holds them."""
    rows = (extent - a + s - 1) // s             # dx rows a, a + s, ... below `extent`
    chosen = [r for r in range(taps) if (a + pad - r * d) % s == 0]
    if rows <= 0:
        return None
    if not chosen:
        return 0, None, 1, slice(0, 0), (0, 0), rows
    J, e = len(chosen), d // math.gcd(s, d)
    base = (a + pad - chosen[0] * d) // s        # dy row of output row 0 under the first tap
    lo = (J - 1) * e - base                      # dy rows before the first that row 0 reads
    last = rows - 1 - lo + (J - 1) * e           # the last dy row read
    start, stop = max(0, -lo), min(P, last + 1)
    if stop <= start:                            # every row it reads is padding
        return 0, None, 1, slice(0, 0), (0, 0), rows
    t = s // math.gcd(s, d)                      # taps apart
    first = chosen[0] - t
    taps = slice(chosen[-1], first if first >= 0 else None, -t)
    return J, taps, e, slice(start, stop), (max(0, lo), max(0, last - P + 1)), rows


@functools.lru_cache(maxsize=256)
def _phases(prob: Problem) -> tuple:
    """Backward data's phases with an output: (a, b, rows' `_phase`, columns' `_phase`)."""
    phases = []
    for a in range(prob.sh):
        rows = _phase(a, prob.sh, prob.dh, prob.pt, prob.R, prob.P, prob.H)
        for b in range(prob.sw if rows is not None else 0):
            cols = _phase(b, prob.sw, prob.dw, prob.pl, prob.S, prob.Q, prob.W)
            if cols is not None:
                phases.append((a, b, rows, cols))
    return tuple(phases)


def backward_data(conv2d, prob: Problem, dy, w, dx):
    """dx (x's shape, dy's dtype, its module's array) = the x-gradient, by sh*sw forward
    `conv2d` calls on views of dy, one per phase (module docstring)."""
    nhwc = prob.layout == "NHWC"
    G = prob.G
    for a, b, rows, cols in _phases(prob):
        out = dx[:, a::prob.sh, b::prob.sw, :] if nhwc else dx[:, :, a::prob.sh, b::prob.sw]
        (J, r_taps, eh, r_slice, r_pad, _), (L, s_taps, ew, s_slice, s_pad, _) = rows, cols
        if not J or not L:
            out[...] = 0
            continue
        view = dy[:, r_slice, s_slice, :] if nhwc else dy[:, :, r_slice, s_slice]
        conv2d(view, phase_filter(prob, w, r_taps, s_taps), padding=(r_pad, s_pad),
               dilation=(eh, ew), groups=G, layout=prob.layout, out=out)
    return dx


def phase_filter(prob: Problem, w, r_taps: slice, s_taps: slice):
    """A phase's filter (`_phase`'s taps of w), re-ordered by one copy of a view: group g's
    C/G x K/G exchanged; (C, J, L, K/G) for NHWC, (C, K/G, J, L) for NCHW."""
    G, Cg, Kg = prob.G, prob.Cg, prob.Kg
    if prob.layout == "NHWC":   # w (K, R, S, C/G)
        taps = w[:, r_taps, s_taps]
        J, L = taps.shape[1:3]
        return taps.reshape(G, Kg, J, L, Cg).transpose(0, 4, 2, 3, 1).reshape(G * Cg, J, L, Kg)
    taps = w[:, :, r_taps, s_taps]  # w (K, C/G, R, S)
    J, L = taps.shape[2:]
    return taps.reshape(G, Kg, Cg, J, L).transpose(0, 2, 1, 3, 4).reshape(G * Cg, Kg, J, L)


def phase_filter_gather(prob: Problem, r_taps: slice, s_taps: slice, strides) -> tuple:
    """`phase_filter` as one gather from w, whose element strides are `strides` (K, C/G, R,
    S): (its five dimensions, (G, C/G, J, L, K/G) for NHWC and (G, C/G, K/G, J, L) for NCHW;
    w's element stride along each; the element offset of its first element in w)."""
    sk, sc, sr, ss = strides
    r0, r1, rt = r_taps.indices(prob.R)
    s0, s1, st = s_taps.indices(prob.S)
    J, L = len(range(r0, r1, rt)), len(range(s0, s1, st))
    G, Cg, Kg = prob.G, prob.Cg, prob.Kg
    if prob.layout == "NHWC":
        dims, along = (G, Cg, J, L, Kg), (Kg * sk, sc, rt * sr, st * ss, sk)
    else:
        dims, along = (G, Cg, Kg, J, L), (Kg * sk, sc, sk, rt * sr, st * ss)
    return dims, along, r0 * sr + s0 * ss


def backward_filter(conv2d, prob: Problem, x, dy, dw):
    """dw (w's shape, x's dtype, its module's array) = the w-gradient, by one forward
    `conv2d` call per group on views of x, dy and dw (module docstring)."""
    nhwc = prob.layout == "NHWC"
    Cg, Kg = prob.Cg, prob.Kg
    # Bottom and right padding that make the output R x S: negative where the forward padding
    # (or x itself) reaches past the last row any tap reads, which a view then leaves out.
    bottom = (prob.R - 1) * prob.dh + prob.sh * (prob.P - 1) + 1 - prob.H - prob.pt
    right = (prob.S - 1) * prob.dw + prob.sw * (prob.Q - 1) + 1 - prob.W - prob.pl
    if prob.N == 0 or prob.H + bottom <= 0 or prob.W + right <= 0:   # no image, or padding
        dw[...] = 0                                                    # only: zero sums
        return dw
    rows = slice(0, prob.H + min(bottom, 0))
    cols = slice(0, prob.W + min(right, 0))
    padding = ((prob.pt, max(bottom, 0)), (prob.pl, max(right, 0)))
    for g in range(prob.G):
        cs, ks = slice(g * Cg, (g + 1) * Cg), slice(g * Kg, (g + 1) * Kg)
        if nhwc:    # images (C/G, H, W, N), filters (K/G, P, Q, N), y (C/G, R, S, K/G)
            images = x[:, rows, cols, cs].transpose(3, 1, 2, 0)
            filters = dy[..., ks].transpose(3, 1, 2, 0)
            out = dw[ks].transpose(3, 1, 2, 0)
        else:       # images (C/G, N, H, W), filters (K/G, N, P, Q), y (C/G, K/G, R, S)
            images = x[:, cs, rows, cols].transpose(1, 0, 2, 3)
            filters = dy[:, ks].transpose(1, 0, 2, 3)
            out = dw[ks].transpose(1, 0, 2, 3)
        conv2d(images, filters, stride=(prob.dh, prob.dw), padding=padding,
               dilation=(prob.sh, prob.sw), layout=prob.layout, out=out)
    return dw
