#!/bin/sh
# The 4-D digits family (issue #25): lr x clip x batch size x epochs, one member per reference sigma.
OMP_NUM_THREADS=1 nice -n 10 .venv/bin/dphypo landscape build --dataset digits \
  --sigma 1.0 --sigma 1.2 --sigma 1.4 --sigma 1.6 --sigma 1.8 --sigma 2.03 \
  --epochs 10 --batch-size 64 --batch-size-grid 32,64,128 --epochs-grid 5,10,20 \
  --seeds 3 --score-noise 0.02 --lr-grid 0.01:10:8:log --clip-grid 0.5:5:6:linear \
  --workers 1 --engine vectorized --out 'landscapes/fourd/digits_mlp_4d_sigma{sigma}.npz'
