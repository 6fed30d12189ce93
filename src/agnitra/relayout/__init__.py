"""Layout re-optimisation (`agnitra layout`, `agnitra.layout()`): permute a model's channels for each state transform it goes through
(2:4 or block sparsity, group-wise quantisation), apply the transform, re-permute for the next."""
