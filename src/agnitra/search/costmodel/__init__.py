"""The learned cost model: gradient-boosted trees over workload, recipe and device features that
predict a recipe's speedup (with its uncertainty), whether it passes verification, its memory and
its quality error; trained from the store, evaluated leave-one-workload-out."""

from agnitra.search.costmodel.dataset import load_rows, read_dataset
from agnitra.search.costmodel.features import Featurizer
from agnitra.search.costmodel.model import CostModel, Prediction

__all__ = ["CostModel", "Featurizer", "Prediction", "load_rows", "read_dataset"]
