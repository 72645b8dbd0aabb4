"""Research mode: landscapes (cached accuracy over a grid), simulated searches on them, and the paper's studies.

Simulated searches never touch private data, so they may show T and every run's score.
"""
