"""Built-in search strategies; importing this package registers them."""

from agnitra.search.strategies import auto as _auto  # noqa: F401
from agnitra.search.strategies import enumerate as _enumerate  # noqa: F401
from agnitra.search.strategies import llm as _llm  # noqa: F401
from agnitra.search.strategies import model as _model  # noqa: F401
from agnitra.search.strategies import nsga2 as _nsga2  # noqa: F401
from agnitra.search.strategies import ppo as _ppo  # noqa: F401
from agnitra.search.strategies import random_order as _random_order  # noqa: F401
from agnitra.search.strategies import tpe as _tpe  # noqa: F401
from agnitra.search.strategies.base import STRATEGIES, Strategy, get_strategy, register_strategy

__all__ = ["STRATEGIES", "Strategy", "get_strategy", "register_strategy"]
