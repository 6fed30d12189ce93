"""A retrieval check for embedding models: does each sentence keep its nearest neighbour?

Mean cosine similarity can stay at 0.99 while the ranking a search index depends on changes;
this check asks the question a user of the embeddings would: over the workload's real sentences,
the fraction whose nearest other sentence (by cosine) is the same under the candidate as under
the original.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def nearest_neighbours(embeddings: torch.Tensor) -> torch.Tensor:
    """For each row of [N, D], the index of its most cosine-similar other row."""
    x = F.normalize(embeddings.double(), dim=-1)
    similarity = x @ x.T
    similarity.fill_diagonal_(-float("inf"))
    return similarity.argmax(dim=-1)


def same_nearest_neighbour(reference: torch.Tensor, candidate: torch.Tensor) -> dict:
    """The share of the N items whose nearest neighbour the candidate keeps, and which changed."""
    ref, cand = nearest_neighbours(reference), nearest_neighbours(candidate)
    changed = (ref != cand).nonzero().flatten().tolist()
    return {"items": int(reference.shape[0]), "same_nearest_neighbour": 1.0 - len(changed) / reference.shape[0], "changed": changed[:20]}
