"""Layout re-optimisation: permute a model's channels for each state transform it goes through
(2:4 or block sparsity, group-wise quantisation), apply the transform, re-permute for the next."""
