"""Update-rule families for the audit: deterministic rules as finite automata (pure numpy, no I/O).

:func:`automaton_rule` builds an :class:`~dphypo.testing.audit.UpdateRule` from a history summary by
breadth-first search; the families are (a) :func:`uniform_rule`, (b) :func:`lookup_table_rule`,
(c) :func:`adversarial_rule`, (d) :func:`history_rule` and (e) :func:`softmax_projected_rule` (DP-HyPO's own
shape). :func:`vertex_density` gives the extreme points of S_{C,c}(π⁽⁰⁾) the families draw from.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

import numpy as np

from dphypo.density import project, softmax
from dphypo.testing.audit._instance import BaseMechanisms, UpdateRule

#: A rule's history summary: any hashable value (the states of the automaton).
K = TypeVar("K", bound=Hashable)


# -- rule families -------------------------------------------------------------------------------------------
def vertex_density(order: np.ndarray, prior: np.ndarray, C: float, c: float) -> np.ndarray:
    """The extreme point of S_{C,c}(π⁽⁰⁾) that fills candidates to C·π⁽⁰⁾ in ``order``.

    Start from c·π⁽⁰⁾ (mass c ≤ 1) and raise candidates in ``order`` to C·π⁽⁰⁾ until the mass is 1: all
    coordinates sit at a bound except at most one, which is what a vertex of this polytope looks like.

    Args:
        order: Permutation of the candidates, shape ``(L,)``; earlier ones get the upper bound.
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.

    Returns:
        The density, shape ``(L,)``.
    """
    f = c * prior
    budget = 1.0 - float(f.sum())
    for lam in order:
        add = min(budget, (C - c) * prior[lam])
        f[lam] += add
        budget -= add
    return f


def _random_density(rng: np.random.Generator, prior: np.ndarray, C: float, c: float, kind: str) -> np.ndarray:
    """A random vertex, or a random interior point (Dirichlet mix of random vertices) of S_{C,c}(π⁽⁰⁾)."""
    if kind == "mixed":
        kind = "vertex" if rng.random() < 0.5 else "interior"
    if kind == "vertex":
        return vertex_density(rng.permutation(prior.size), prior, C, c)
    verts = np.stack([vertex_density(rng.permutation(prior.size), prior, C, c) for _ in range(3)])
    return rng.dirichlet(np.ones(3)) @ verts


def automaton_rule(
    name: str,
    initial_key: K,
    step: Callable[[K, int], K],
    density: Callable[[K], np.ndarray],
    n_outputs: int,
    *,
    max_states: int = 50_000,
) -> UpdateRule:
    """Build an :class:`UpdateRule` by breadth-first search over the history summaries a rule keeps.

    Args:
        name: Rule description.
        initial_key: Summary of the empty history.
        step: ``(key, output) -> key`` after one more run.
        density: ``key -> density`` over candidates, shape ``(L,)``.
        n_outputs: K = L·|Y|.
        max_states: Refuse summaries that grow beyond this many states.

    Returns:
        The automaton.
    """
    index: dict[K, int] = {initial_key: 0}
    keys: list[K] = [initial_key]
    rows: list[list[int]] = []
    while len(rows) < len(keys):
        key = keys[len(rows)]
        row: list[int] = []
        for o in range(n_outputs):
            nxt = step(key, o)
            if nxt not in index:
                if len(keys) >= max_states:
                    raise ValueError(f"rule {name!r} has more than max_states={max_states} states")
                index[nxt] = len(keys)
                keys.append(nxt)
            row.append(index[nxt])
        rows.append(row)
    return UpdateRule(np.stack([density(k) for k in keys]), np.array(rows, dtype=np.int64), 0, name)


def uniform_rule(prior: np.ndarray, n_outputs: int) -> UpdateRule:
    """Family (a): π⁽ʲ⁾ = π⁽⁰⁾ always (uniform random search; the only rule when C = c = 1).

    Args:
        prior: π⁽⁰⁾, shape ``(L,)``.
        n_outputs: K = L·|Y|.

    Returns:
        A one-state automaton.
    """
    return UpdateRule(prior[None, :], np.zeros((1, n_outputs), dtype=np.int64), 0, "uniform")


def lookup_table_rule(
    rng: np.random.Generator,
    prior: np.ndarray,
    C: float,
    c: float,
    n_scores: int,
    *,
    memory: tuple[str, ...] = ("best", "last", "step"),
    horizon: int = 3,
    kind: str = "mixed",
) -> UpdateRule:
    """Family (b): a random table from a bounded-memory state to densities of S_{C,c}(π⁽⁰⁾).

    Args:
        rng: Draws the table (one density per state, in breadth-first order).
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        n_scores: |Y|.
        memory: Which of ``"best"`` (best output so far), ``"last"`` (last output) and ``"step"``
            (min(j, horizon)) the state keeps.
        horizon: Cap J of the step counter.
        kind: ``"vertex"`` (random extreme points), ``"interior"`` (Dirichlet mixes of 3 vertices) or
            ``"mixed"`` (a fair coin per state).

    Returns:
        The automaton.
    """
    n_out = prior.size * n_scores
    table: dict[tuple[int, int, int], np.ndarray] = {}

    def step(key: tuple[int, int, int] | str, o: int) -> tuple[int, int, int] | str:
        best, _, j = (-1, -1, 0) if isinstance(key, str) else key
        return (
            max(best, o) if "best" in memory else 0,
            o if "last" in memory else 0,
            min(j + 1, horizon) if "step" in memory else 0,
        )

    def density(key: tuple[int, int, int] | str) -> np.ndarray:
        if isinstance(key, str):
            return prior.copy()
        if key not in table:
            table[key] = _random_density(rng, prior, C, c, kind)
        return table[key]

    start: tuple[int, int, int] | str = "start"  # the empty history
    return automaton_rule(f"table[{'+'.join(memory)},J={horizon},{kind}]", start, step, density, n_out)


def adversarial_rule(
    prior: np.ndarray,
    C: float,
    c: float,
    base: BaseMechanisms,
    *,
    trigger: str = "best",
    threshold: int = 0,
    direction: int = 1,
    score: int = -1,
    otherwise: str = "opposite",
) -> UpdateRule:
    """Family (c): after a good output, put C·π⁽⁰⁾ on the candidates most or least revealing about D vs D′.

    Most (``direction=1``) or least (``direction=-1``), ranked by ``log P_λ(score) − log P′_λ(score)``.

    Args:
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        base: The instance's candidates (the rule is a fixed function known before the data; it may use them).
        trigger: ``"best"`` (best-so-far score ≥ threshold), ``"last"`` (last score ≥ threshold) or ``"llr"``
            (the sign of the clipped running log-likelihood ratio of the observed outputs, a bounded-memory
            test of "looks like D").
        threshold: Score index that counts as good.
        direction: ``1`` or ``-1``.
        score: Score whose likelihood ratio ranks the candidates (default: the top score).
        otherwise: Density when not triggered: ``"prior"`` or ``"opposite"`` (the reverse vertex).

    Returns:
        The automaton.
    """
    n_cand, n_scores = base.probs.shape
    n_out = n_cand * n_scores
    llr_rank = np.log(base.probs[:, score]) - np.log(base.probs_prime[:, score])
    favour = vertex_density(np.argsort(-direction * llr_rank, kind="stable"), prior, C, c)
    rest = prior.copy() if otherwise == "prior" else vertex_density(
        np.argsort(direction * llr_rank, kind="stable"), prior, C, c
    )
    # An output's likelihood ratio is P_λ(y)/P′_λ(y) (the density, the same function of the history on D and
    # D′, cancels); it is rounded to a grid of 1/4 of the largest so the running sum has few states.
    llr_out = (np.log(base.probs) - np.log(base.probs_prime)).T.ravel()
    unit = max(float(np.abs(llr_out).max()), 1e-12) / 4.0
    llr_steps = np.rint(llr_out / unit).astype(int)

    def step(key: tuple[int, int] | str, o: int) -> tuple[int, int] | str:
        best, llr = (-1, 0) if isinstance(key, str) else key
        if trigger == "llr":
            return (0, int(np.clip(llr + llr_steps[o], -8, 8)))
        return (max(best, o // n_cand) if trigger == "best" else o // n_cand, 0)

    def density(key: tuple[int, int] | str) -> np.ndarray:
        if isinstance(key, str):
            return prior.copy()
        value, llr = key
        hit = llr > 0 if trigger == "llr" else value >= threshold
        return favour if hit else rest

    name = f"adversarial[{trigger}>={threshold},dir={direction:+d},score={score},else={otherwise}]"
    start: tuple[int, int] | str = "start"  # the empty history
    return automaton_rule(name, start, step, density, n_out)


def history_rule(
    rng: np.random.Generator,
    prior: np.ndarray,
    C: float,
    c: float,
    n_outputs: int,
    *,
    depth: int = 2,
    kind: str = "vertex",
) -> UpdateRule:
    """Family (d): the full history of the first ``depth`` runs is the state (exact for T ≤ depth + 1).

    Each of the Σ_{h ≤ depth} K^h histories gets its own random density; later runs keep the density of the
    first ``depth`` outputs.

    Args:
        rng: Draws the densities (breadth-first order).
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        n_outputs: K = L·|Y|.
        depth: Length of the remembered history prefix.
        kind: As in :func:`lookup_table_rule`.

    Returns:
        The automaton.
    """

    def step(key: tuple[int, ...], o: int) -> tuple[int, ...]:
        return key if len(key) >= depth else (*key, o)

    table: dict[tuple[int, ...], np.ndarray] = {(): prior.copy()}

    def density(key: tuple[int, ...]) -> np.ndarray:
        if key not in table:
            table[key] = _random_density(rng, prior, C, c, kind)
        return table[key]

    empty: tuple[int, ...] = ()
    return automaton_rule(f"history[depth={depth},{kind}]", empty, step, density, n_outputs)


def softmax_projected_rule(
    prior: np.ndarray, C: float, c: float, n_scores: int, *, beta: float = 5.0, optimism: float = 1.0
) -> UpdateRule:
    """Family (e): DP-HyPO's own shape: softmax(β·best score per candidate) projected onto S_{C,c}.

    State = best score index seen per candidate (unseen = ``optimism`` in [0, 1] on the normalised scale);
    the density is :func:`dphypo.density.project` of the softmax (DP-HyPO eq. 3.1; Algorithm 3 minus the GP).

    Args:
        prior: π⁽⁰⁾, shape ``(L,)``.
        C: Upper ratio bound.
        c: Lower ratio bound.
        n_scores: |Y|.
        beta: Inverse temperature β of the softmax.
        optimism: Normalised score assumed for unseen candidates.

    Returns:
        The automaton.
    """
    n_cand = prior.size

    def step(key: tuple[int, ...], o: int) -> tuple[int, ...]:
        seen = list(key)
        seen[o % n_cand] = max(seen[o % n_cand], o // n_cand)
        return tuple(seen)

    def density(key: tuple[int, ...]) -> np.ndarray:
        if all(s < 0 for s in key):
            return prior.copy()
        top = max(n_scores - 1, 1)
        scores = np.array([optimism if s < 0 else s / top for s in key])
        return project(softmax(scores, beta), prior, C, c)

    name = f"softmax-projected[beta={beta:.3g},optimism={optimism:.2g}]"
    return automaton_rule(name, (-1,) * n_cand, step, density, n_cand * n_scores)
