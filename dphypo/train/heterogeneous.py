"""Candidates whose hyperparameters change their privacy: each grid point trains at its own σ_i (privacy rule 8).

When a search space declares privacy-affecting axes (batch size, epochs: ``SearchSpace(privacy_roles=...)``), every
distinct (batch size, epochs) setting is its own DP-SGD mechanism.
:func:`dphypo.privacy.heterogeneous.calibrate_heterogeneous` gives each setting the smallest σ_i whose per-run
mechanism (DP-SGD + the score release) is dominated by one reference mechanism, which the accountant charges for
every run (docs/proofs/heterogeneous.md, Lemma H1).

:class:`HeterogeneousDPSGD` is the :class:`~dphypo.search.records.RunMechanism` of such a search:

* its per-run curve and profile are the reference's (what :class:`~dphypo.privacy.PrivacyAccounting` accounts);
* :meth:`HeterogeneousDPSGD.open` opens the run under *its own* candidate mechanism
  ``DPSGDMechanism(σ_i, batch_i, epochs_i)``: training (Opacus or the vectorised engine) uses that σ, rate and step
  count, and the run's budget check compares what it booked with that candidate mechanism;
* at construction every candidate mechanism's curve is checked against the reference at every order (the privacy
  layer computed σ_i from its own copy of Opacus's arithmetic; this is the training layer's independent check).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dphypo.privacy import RdpCurve
from dphypo.privacy.heterogeneous import HeterogeneousPlan
from dphypo.privacy.profiles import PrivacyProfile
from dphypo.search.records import Run, RunContext
from dphypo.space import SearchSpace
from dphypo.train.mechanism import DPSGDMechanism, DPSGDRun
from dphypo.train.recipe import DPSGD

__all__ = ["HeterogeneousDPSGD"]


@dataclass(frozen=True, eq=False)
class HeterogeneousDPSGD:
    """Per-setting DP-SGD mechanisms under one dominating reference.

    Args:
        plan: σ_i per setting and the reference (:func:`~dphypo.privacy.heterogeneous.calibrate_heterogeneous`).
        settings: The distinct privacy settings, role → value, in the plan's candidate order
            (:meth:`~dphypo.space.SearchSpace.privacy_settings`).
        point_setting: Shape ``(grid size,)``: the setting of every grid point.
        roles: Axis name → privacy role (the space's ``privacy_roles``).
        mechanisms: One :class:`DPSGDMechanism` per setting, at its σ_i.
    """

    plan: HeterogeneousPlan
    settings: tuple[dict[str, int | float], ...]
    point_setting: tuple[int, ...]
    roles: tuple[tuple[str, str], ...]
    mechanisms: tuple[DPSGDMechanism, ...]

    def __post_init__(self) -> None:
        if len(self.mechanisms) != len(self.plan.sigmas) or len(self.settings) != len(self.plan.sigmas):
            raise ValueError(f"one mechanism and one setting per planned candidate ({len(self.plan.sigmas)}), got "
                             f"{len(self.mechanisms)} and {len(self.settings)}")
        base = self.plan.base_rdp()
        for setting, mechanism in zip(self.settings, self.mechanisms, strict=True):
            own = mechanism.rdp(orders=base.orders).epsilons
            if np.any(own > base.epsilons * (1 + 1e-12) + 1e-15):
                raise ValueError(f"candidate {setting} at sigma={mechanism.sigma:g} spends more per run than the "
                                 "reference the search is accounted with (privacy rule 8)")

    @classmethod
    def from_plan(cls, plan: HeterogeneousPlan, space: SearchSpace, training: DPSGD) -> HeterogeneousDPSGD:
        """The mechanism of ``space``'s privacy settings under ``plan``, with ``training``'s sizes and score noise.

        Args:
            plan: The calibrated plan, its candidates in the order of ``space.privacy_settings()``.
            space: The search space (with ``privacy_roles``).
            training: The DP-SGD settings every candidate shares (sizes, score noise, secure mode; its batch size
                and epochs apply where no axis plays that role).

        Returns:
            The mechanism.
        """
        settings, point_setting = space.privacy_settings()
        mechanisms = tuple(
            dataclasses.replace(
                training.mechanism(sigma),
                batch_size=int(setting.get("batch_size", training.batch_size)),
                epochs=int(setting.get("epochs", training.epochs)),
            )
            for setting, sigma in zip(settings, plan.sigmas, strict=True)
        )
        return cls(plan, tuple(settings), tuple(int(i) for i in point_setting),
                   tuple(space.privacy_roles.items()), mechanisms)

    # -- the RunMechanism protocol (dphypo.search.records)
    @property
    def score_noise(self) -> float | None:
        """The common score-release noise (counts)."""
        return self.mechanisms[0].score_noise

    def rdp(self, orders: Iterable[float] | None = None) -> RdpCurve:
        """The reference's per-run curve: valid for every candidate (what the accountant charges per run)."""
        return self.plan.base_rdp(orders)

    def profile(self) -> PrivacyProfile | None:
        """The reference's profile where the plan dominated the candidates' profiles (a uniform search), else None."""
        return self.plan.base_profile()

    def for_point(self, grid_index: int) -> DPSGDMechanism:
        """The DP-SGD mechanism grid point ``grid_index`` trains under."""
        return self.mechanisms[self.point_setting[grid_index]]

    def open(self, run: Run) -> DPSGDRun:
        """``run`` under its own candidate mechanism; the context knows which axes the mechanism consumed."""
        if run.mechanism is not self:
            raise ValueError(f"run.mechanism must be this HeterogeneousDPSGD, got {run.mechanism!r}")
        candidate = self.for_point(run.grid_index)
        context = candidate.open(dataclasses.replace(run, mechanism=candidate))
        context.privacy_axes = dict(self.roles)
        return context

    def private_score(self, run: RunContext, count: int) -> float:
        """The candidate's score release (every candidate shares the score noise)."""
        mechanism = run.mechanism
        assert isinstance(mechanism, DPSGDMechanism)  # open() made this context under the candidate's mechanism
        return mechanism.private_score(run, count)

    def describe(self) -> dict[str, Any]:
        """The reference, σ_ref and every setting's σ_i, q and steps (JSON-ready: sealed, and printed by a dry run)."""
        reference = self.plan.reference
        return {
            "kind": "heterogeneous DP-SGD (each candidate dominated by one reference)",
            "reference": {**self.reference_description(), "score_noise": reference.score_noise},
            "privacy_roles": dict(self.roles),
            "candidates": [{**setting, **self.describe_mechanism(mechanism)}
                           for setting, mechanism in zip(self.settings, self.mechanisms, strict=True)],
            "profiles": self.plan.profiles, "profile_slack": self.plan.profile_slack,
        }

    @staticmethod
    def describe_mechanism(mechanism: DPSGDMechanism) -> dict[str, Any]:
        """σ, batch size, epochs, q and steps of one candidate mechanism."""
        return {"sigma": mechanism.sigma, "batch_size": mechanism.batch_size, "epochs": mechanism.epochs,
                "sample_rate": mechanism.sample_rate, "steps": mechanism.steps}

    def for_params(self, params: Mapping[str, Any]) -> DPSGDMechanism:
        """The mechanism of the grid point ``params`` (its privacy axes' values select the setting).

        Raises:
            ValueError: ``params`` lacks a privacy axis or names a setting that is not on the grid.
        """
        try:
            wanted = {role: params[name] for name, role in self.roles}
        except KeyError as missing:
            raise ValueError(f"params must give every privacy axis {[n for n, _ in self.roles]}, got "
                             f"{sorted(params)}") from missing
        for setting, mechanism in zip(self.settings, self.mechanisms, strict=True):
            if all(setting.get(role) == value for role, value in wanted.items()):
                return mechanism
        raise ValueError(f"params {dict(params)!r} name no setting of the grid")

    def reference_description(self) -> dict[str, Any]:
        """σ_ref, q and steps of the reference run every candidate is dominated by."""
        reference = self.plan.reference
        return {"sigma": self.plan.sigma_ref, "sample_rate": reference.sample_rate, "steps": reference.steps}

    def describe_point(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """What a release shows for the released point: its candidate's σ, q and steps, and the reference."""
        return {**self.describe_mechanism(self.for_params(params)), "reference": self.reference_description()}
