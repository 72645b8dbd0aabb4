"""How a search is randomised (:class:`RepeatAndSelect`) and what the accountant reports (:class:`PrivacyReport`).

A :class:`RepeatAndSelect` says how a search is randomised (the distribution of T and DP-HyPO's density bounds C, c;
Wang et al. 2023, arXiv:2306.05734v2, Framework 1). It refuses at construction the combinations no theorem covers
(adaptive Poisson or binomial T), so nothing is sampled or trained under an unaccountable configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dphypo.privacy.rdp import zero_rdp
from dphypo.privacy.run_counts import Binomial, Poisson, RunCountDistribution, TruncatedNegativeBinomial
from dphypo.privacy.search_rdp import tuning_rdp
from dphypo.privacy.tuning import check_density_bounds

__all__ = ["PrivacyReport", "RepeatAndSelect"]


@dataclass(frozen=True)
class RepeatAndSelect:
    """How a search is randomised: T's distribution and DP-HyPO's density-ratio bounds.

    Args:
        run_count: Distribution of the number of runs T (drawn once, before any data is touched).
        C: Upper bound on π⁽ʲ⁾/π⁽⁰⁾ (≥ 1). ``C = c = 1`` is a uniform (non-adaptive) search.
        c: Lower bound on π⁽ʲ⁾/π⁽⁰⁾ (in (0, 1]).
    """

    run_count: RunCountDistribution
    C: float = 1.0
    c: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.run_count, RunCountDistribution):
            raise TypeError(f"run_count must be a RunCountDistribution, got {self.run_count!r}")
        check_density_bounds(self.C, self.c)
        object.__setattr__(self, "C", float(self.C))
        object.__setattr__(self, "c", float(self.c))
        if isinstance(self.run_count, Poisson) and self.adaptive:
            # Fail at configuration time, before anything is sampled or trained.
            tuning_rdp(zero_rdp(), self.run_count, self.C, self.c)
        if isinstance(self.run_count, Binomial) and self.adaptive:
            raise ValueError(
                f"an adaptive search (C={self.C:g} > c={self.c:g}) with binomial T has no privacy theorem: only "
                "Koskela-Redberg-Wang 2024 Thm 5.7 covers binomial T, for a uniform search; use "
                "negbin/geometric/logarithmic runs or C = c = 1"
            )

    @property
    def adaptive(self) -> bool:
        """Whether the sampling density may move away from the prior (C > c)."""
        return self.c < self.C

    def uniform(self) -> RepeatAndSelect:
        """The same run count with C = c = 1 (the non-adaptive baseline)."""
        return RepeatAndSelect(self.run_count)

    def describe(self) -> dict[str, Any]:
        """JSON-ready parameters of the run-count distribution and the bounds."""
        rc = self.run_count
        out: dict[str, Any] = {"runs": rc.name, "expected_runs": rc.mean, "C": self.C, "c": self.c}
        if isinstance(rc, TruncatedNegativeBinomial):
            out.update(theta=rc.theta, gamma=rc.gamma)
        if isinstance(rc, Binomial):
            out.update(n=rc.n, p=rc.p)
        return out


@dataclass(frozen=True)
class PrivacyReport:
    """The accounted privacy of a search, in a form a user can read.

    Attributes:
        epsilon: Total ε of the search at ``delta``.
        delta: δ of the guarantee (0 for a pure-DP statement).
        base_epsilon: ε of one candidate run alone at the same δ.
        repetition_epsilon: What the random number of runs adds (uniform search ε − base ε).
        adaptivity_epsilon: What adaptivity adds (total ε − uniform search ε); 0 when C = c = 1.
        order: Rényi order α at which the conversion to (ε, δ) was tightest (``inf``: pure bound).
        order_hat: The second order α̂ of DP-HyPO Theorem 1 (``nan`` where the theorem has none).
        expected_runs: E[T].
        theorem: The theorem that produced ``epsilon``.
        search: The search configuration.
        base_label: Description of the per-candidate mechanism.
        methods: ε of every valid bound that was evaluated (``"rdp"`` and, for a uniform search given a privacy
            profile, the Koskela-Redberg-Wang profile bounds); ``epsilon`` is their minimum.
        method: The method that gave ``epsilon``.
        charged_runs: Lost attempts (crashed or dead-worker runs) charged on top of the search
            (:func:`~dphypo.privacy.charged.account_charged`); 0 for an uninterrupted search.
        charged_epsilon: What those charges added to ``epsilon``.
        profile_skipped: Why the privacy-profile bounds were not evaluated although asked for (the PLD would
            exceed its size cap, :class:`~dphypo.privacy.profiles.ProfileSkipped`), else ``None``.
        bound: How the run's two parts (DP-SGD training, score release) were combined, named for the release:
            ``"Theorem S (max of train/validation sides)"`` under a per-record split
            (:func:`~dphypo.privacy.split_account.account_split`), ``"sum of DP-SGD and score parts"`` where a caller
            names it, ``None`` (not in :meth:`to_dict`) otherwise.
        split: Under a per-record split: the rule and both sides' ε and methods (JSON-ready), else ``None``.
    """

    epsilon: float
    delta: float
    base_epsilon: float
    repetition_epsilon: float
    adaptivity_epsilon: float
    order: float
    order_hat: float
    expected_runs: float
    theorem: str
    search: RepeatAndSelect
    base_label: str
    methods: dict[str, float] = field(default_factory=dict)
    method: str = "rdp"
    charged_runs: int = 0
    charged_epsilon: float = 0.0
    profile_skipped: str | None = None
    bound: str | None = None
    split: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (non-finite numbers become ``None``)."""

        def clean(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        named: dict[str, Any] = {} if self.bound is None else {"bound": self.bound}
        if self.split is not None:
            named["split"] = dict(self.split)
        return {
            **named,
            "epsilon": clean(self.epsilon),
            "delta": self.delta,
            "base_epsilon": clean(self.base_epsilon),
            "order": clean(self.order),
            "order_hat": clean(self.order_hat),
            "expected_runs": self.expected_runs,
            "theorem": self.theorem,
            "breakdown": {
                "one_run": clean(self.base_epsilon),
                "repetition": clean(self.repetition_epsilon),
                "adaptivity": clean(self.adaptivity_epsilon),
                "charged_runs": clean(self.charged_epsilon),
            },
            "charged_runs": self.charged_runs,
            **self.search.describe(),
            "base_mechanism": self.base_label,
            "methods": {name: clean(eps) for name, eps in self.methods.items()},
            "method": self.method,
            "profile_skipped": self.profile_skipped,
        }
