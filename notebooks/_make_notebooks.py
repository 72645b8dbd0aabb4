"""Regenerate the notebooks from this script (keeps them reviewable as code): python notebooks/_make_notebooks.py"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SIZE = '''%matplotlib inline
import os

# CI executes the notebooks at a small size: DPHYPO_NB_SMALL=1.
SMALL = os.environ.get("DPHYPO_NB_SMALL") == "1"'''

QUICKSTART = [
    new_markdown_cell("""# Quickstart: a private hyperparameter search on digits

We tune the learning rate and clipping norm of a small MLP trained with DP-SGD (Opacus) on scikit-learn's digits
(embedded, offline) and get **one (ε, δ) for the whole search**. The search is DP-HyPO's GP strategy: a random
number of runs T, each candidate drawn from a GP-UCB softmax density projected onto densities within
[c, C] × the prior; only the best run is released."""),
    new_code_cell(SIZE),
    new_code_cell("""import dphypo
from dphypo import DPSGD, GPUCB, Float, LogFloat, SearchSpace
from dphypo.privacy import geometric
from dphypo.train import DPSGDObjective, load_dataset

splits = load_dataset("digits")
n_train, n_val = len(splits.y_train), len(splits.y_val)
space = SearchSpace({"lr": LogFloat(1e-2, 10, 4 if SMALL else 16), "clip": Float(0.3, 6, 3 if SMALL else 20)})
n_train, n_val, space"""),
    new_markdown_cell("""`dphypo.tune` calibrates the DP-SGD noise σ so that the *whole search* costs ε = 8 at δ = 1e-5, including
each run's noisy validation score (Gaussian noise with std 0.02·n_val on the count of correct predictions).
`DPSGDObjective("digits")` trains under the mechanism the search hands to every run (`run.make_private`) and
returns `run.private_score(correct)`, which adds exactly that accounted noise. With your own training function,
return `run.private_score(number_of_correct_validation_predictions)` the same way."""),
    new_code_cell("""training = DPSGD(n_train=n_train, n_val=n_val, batch_size=64, epochs=2 if SMALL else 10,
                 score_noise=0.02 * n_val)
result = dphypo.tune(
    DPSGDObjective("digits"),
    space,
    training,
    epsilon=8.0,
    delta=1e-5,
    runs=geometric(0.5 if SMALL else 0.05),
    strategy=GPUCB(C=2.0, c=0.75),
)  # no seed: T and every noise draw come from fresh OS entropy (a seed would have to stay secret)
release = result.release
print("released hyperparameters:", release.params)
print("released (private) validation accuracy:", round(release.score, 4))
print(f"total epsilon = {release.epsilon:.3f} at delta = {release.delta:g}; sigma = {release.mechanism.sigma:.4f}")
print("breakdown: one run", round(release.privacy.base_epsilon, 3),
      "+ repetition", round(release.privacy.repetition_epsilon, 3),
      "+ adaptivity", round(release.privacy.adaptivity_epsilon, 3))"""),
    new_code_cell("""# The released model; its test accuracy uses the (public) test split and is not covered by epsilon.
release.artifact.test_accuracy(splits)"""),
    new_markdown_cell("""`result.history` holds T, every run's score and the densities. **It is not private**: publishing any of
it voids the guarantee above. Use it for debugging only."""),
    new_code_cell("""history = result.history
print("curator only - T =", history.run_count, "; failed runs:", sum(t.failed for t in history.trials))"""),
]

ACCOUNTING = [
    new_markdown_cell("""# Accounting: what a private search costs, and the noise that meets a budget

The accountant implements DP-HyPO Theorem 1 (adaptive search, truncated negative binomial T), Theorem 2 (pure DP)
and Papernot–Steinke Theorem 6 (Poisson T, uniform search only) on a dense grid of Rényi orders, with the tight
RDP → (ε, δ) conversion."""),
    new_code_cell("""%matplotlib inline
from dphypo.privacy import (
    Poisson, RepeatAndSelect, TruncatedNegativeBinomial, account, account_pure, calibrate_dpsgd_sigma, dpsgd_rdp,
    geometric,
)

q, steps, delta = 256 / 60000, 2344, 1e-5   # the paper's MNIST setting: batch 256 of 60,000, 10 epochs
gp = RepeatAndSelect(geometric(0.01), C=2.0, c=0.75)
report = account(dpsgd_rdp(0.71, q, steps), gp, delta)
report.to_dict()"""),
    new_markdown_cell("""The breakdown says where the budget goes: one run, what the random number of runs adds, and what
adaptivity (the log(C/c) terms) adds. The same curve with C = c = 1 is Papernot–Steinke's uniform search."""),
    new_code_cell("""from dphypo.visualization import plot_epsilon_breakdown

base = dpsgd_rdp(1.0, q, steps)
reports = [(label, account(base, RepeatAndSelect(geometric(0.05), C, c), delta))
           for label, C, c in [("uniform", 1, 1), ("C=1.25", 1.25, 0.8), ("C=1.5", 1.5, 2 / 3), ("C=2", 2, 0.75)]]
plot_epsilon_breakdown(reports)"""),
    new_code_cell("""# Calibration: the smallest sigma for which the whole search meets epsilon = 8 (conservative, rtol 1e-4).
for name, search in [("uniform", gp.uniform()), ("GP C=2, c=0.75", gp)]:
    cal = calibrate_dpsgd_sigma(8.0, delta, q, steps, search)
    print(f"{name:16s} sigma = {cal.sigma:.4f}  epsilon = {cal.report.epsilon:.4f}  ({cal.evaluations} evaluations)")"""),
    new_code_cell("""# Run-count families at the same E[T] = 10 (uniform search, sigma = 1): the shape matters.
for runs in [TruncatedNegativeBinomial.from_mean(t, 10) for t in (0.0, 0.5, 1.0)] + [Poisson(10.0)]:
    r = account(dpsgd_rdp(1.0, q, 2340), RepeatAndSelect(runs), delta)
    print(f"{runs.name:12s} epsilon = {r.epsilon:.4f}  ({r.theorem})")"""),
    new_code_cell("""# Pure DP (Theorem 2): each run 1-DP, TNB(0.5) runs, C = 1.5, c = 0.8 -> (2 + theta)(eps + log(C/c)).
account_pure(1.0, RepeatAndSelect(TruncatedNegativeBinomial(0.5, 0.05), 1.5, 0.8)).epsilon"""),
    new_code_cell("""# An adaptive search with Poisson T has no theorem: dphypo refuses it.
try:
    RepeatAndSelect(Poisson(10.0), C=2.0, c=0.75)
except ValueError as err:
    print(err)"""),
]

UNIFORM_VS_GP = [
    new_markdown_cell("""# Uniform vs GP search on the shipped landscapes

A landscape holds the mean and std of the validation accuracy of real DP-SGD runs over the lr × clip grid. A
simulated search draws q ~ N(mean, std) per visit and is judged by the mean of the λ it releases.

**White-box setting** (DP-HyPO §4.2): the total budget is fixed (ε = 8), so the GP search, which pays for
adaptivity, trains every candidate with more noise — it runs on the landscape built at σ = 1.7673, uniform search
on the one built at σ = 1.2226."""),
    new_code_cell(SIZE + '''
REPEATS = int(os.environ.get("DPHYPO_NB_REPEATS", "4" if SMALL else "200"))
T_VALUES = [2, 4] if SMALL else [5, 10, 20, 40]'''),
    new_code_cell("""from pathlib import Path

from dphypo.simulation.landscapes import load_landscape
from dphypo.visualization import plot_accuracy_vs_T, plot_landscape

root = Path("..") / "landscapes" if Path("../landscapes").exists() else Path("landscapes")
uniform_land = load_landscape(root / "digits_mlp_sigma1.2226.npz")
gp_land = load_landscape(root / "digits_mlp_sigma1.7673.npz")
plot_landscape(uniform_land)"""),
    new_code_cell("""plot_landscape(gp_land)"""),
    new_code_cell("""from dphypo.simulation.simulate import simulate
from dphypo.strategies import GPUCB, Uniform

results = []
for T in T_VALUES:
    results += simulate(uniform_land, [Uniform()], repeats=REPEATS, T=T, seed=0, workers=1)
    results += simulate(gp_land, [GPUCB()], repeats=REPEATS, T=T, C=2.0, c=0.75, seed=0, workers=1)
for r in results:
    print(f"{r.strategy:8s} T={r.T:3d}  mean={r.mean:.4f}  95% CI=[{r.ci95[0]:.4f}, {r.ci95[1]:.4f}]")"""),
    new_code_cell("""plot_accuracy_vs_T(results, best_value=uniform_land.best_value)"""),
    new_markdown_cell("""**Black-box setting**: the base landscape is fixed and adaptivity is paid on top — the total ε of each
arm differs, and is printed beside its utility."""),
    new_code_cell("""from dphypo.privacy import PrivacyAccounting, RepeatAndSelect, geometric
from dphypo.train import DPSGDMechanism, load_dataset

splits = load_dataset("digits")
meta = uniform_land.metadata
mechanism = DPSGDMechanism(sigma=meta["sigma"], batch_size=meta["batch_size"], epochs=meta["epochs"],
                 n_train=len(splits.y_train), n_val=len(splits.y_val), score_noise=meta["score_noise"] * len(splits.y_val))
T = T_VALUES[-1]
for C in (1.0, 1.25, 1.5):
    strategy = Uniform() if C == 1.0 else GPUCB()
    arm = simulate(uniform_land, [strategy], repeats=REPEATS, T=T, C=C, c=1 / C, seed=1, workers=1)[0]
    eps = PrivacyAccounting(RepeatAndSelect(geometric(1 / T), C, 1 / C), mechanism.rdp(), 1e-5).account().epsilon
    print(f"C={C:<5} {arm.strategy:8s} mean={arm.mean:.4f} CI=[{arm.ci95[0]:.4f}, {arm.ci95[1]:.4f}]"
          f"  total eps (geometric T, E[T]={T}) = {eps:.2f}")"""),
]


def main() -> None:
    for name, cells in [("quickstart", QUICKSTART), ("accounting", ACCOUNTING), ("uniform_vs_gp", UNIFORM_VS_GP)]:
        nb = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}})
        nbformat.write(nb, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    main()
