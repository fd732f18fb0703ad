"""How a TieredCache hooks into a model and its client: a pre-hook and a hook on the model's
forward, and the handler of each row's plans. All hold the cache weakly."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from .._kvtier import Plan
from . import attention

if TYPE_CHECKING:
    from .cache import TieredCache
    from .rows import Row


def plan_handler(cache: TieredCache, row: Row) -> Callable[[Plan], None]:
    """Runs a plan of `row` through its cache, held weakly (a cache dropped without close()
    acknowledges its plans as not applied)."""
    ref = weakref.ref(cache)

    def handle(plan: Plan) -> None:
        c = ref()
        if c is None:
            row.router.client.ack_plan(plan.epoch, applied=False)
        else:
            c._on_plan(row, plan)

    return handle


def remove_hooks(hooks: list[RemovableHandle]) -> None:
    for hook in hooks:
        hook.remove()
    hooks.clear()


def install_hooks(cache: TieredCache, model: torch.nn.Module) -> list[RemovableHandle]:
    """A pre-hook on the model (padding, finished rows and plans before the mask is built; marks
    the cache as the one the kvtier attention function serves) and a hook after it. They act only
    for forwards that use this cache and hold it weakly."""
    ref = weakref.ref(cache)

    def ours(kwargs: dict[str, Any]) -> TieredCache | None:
        c = ref()
        used = kwargs.get("cache", kwargs.get("past_key_values"))
        return c if c is not None and used is c else None

    def before(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (c := ours(kwargs)) is not None:
            c._before_forward(kwargs)
            attention.activate(c)

    def after(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if (c := ours(kwargs)) is not None:
            attention.deactivate(c)
            if c._forward is not None:
                c._forward = None
                raise RuntimeError("the forward ended before every layer's attention scored: is the model's "
                                   "attention implementation routed through transformers' AttentionInterface?")

    return [model.register_forward_pre_hook(before, with_kwargs=True),
            model.register_forward_hook(after, with_kwargs=True)]
