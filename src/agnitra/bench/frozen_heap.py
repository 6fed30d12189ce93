"""Imported last by the CPU fork server (`fork_server.PRELOAD`): what the server imported goes out
of the collector's reach once, so each forked worker's collections walk only its own objects
(a full one over a torch import's ~400k objects takes 0.3 s in every worker otherwise)."""

import gc

gc.collect()
gc.freeze()
