"""DTensor sharding rules of the torch.ops.glmnorm.* ops (tensor / sequence parallel, FSDP2).

Imported by glmnorm.torch (nothing to call): once it is imported, a DTensor reaching any
glmnorm op is computed shard by shard with no communication when the normalised tensor is
sharded on a row dim, and redistributed by DTensor otherwise. docs/DISTRIBUTED.md has the
table; in short, per mesh dim, with ``x`` the normalised tensor (x / residual / qkv):

* ``Shard(d)`` on any dim d but the last (incl. ``_StridedShard``): kept; every tensor of the
  same shape (delta, dy, dqkv) is redistributed to x's placement, outputs of x's shape get it.
* ``Replicate()``: kept; every output is replicated.
* ``Shard(last)`` or ``Partial()``: x is redistributed to ``Replicate()`` (all-gather /
  all-reduce) first, as PyTorch does for its own layer_norm; for an argument the op updates
  in place (add_rms_norm's residual, qk_norm_'s qkv) that would lose the write, so those ops
  raise RuntimeError naming the op, the argument and the placement instead.
* Weights (weight, q_weight, k_weight), the RoPE cos / sin tables, a static quant scale:
  ``Replicate()`` (DTensor gathers a sharded weight, e.g. one FSDP2 handed over unsharded).
* Weight gradients (rms_norm_backward's dweight, qk_norm_backward's dq_weight / dk_weight) of a
  row-sharded x are ``Partial("sum")``: each rank's sum over its rows; DTensor reduces them
  when the gradient is used (redistribute / full_tensor, or the optimizer step of a
  Replicate parameter).
* 1-D per-row tensors (the quant ops' per-row ``scales`` output, qk_norm's RoPE
  ``positions``) are ``Shard(0)`` where the rows of a shard are a contiguous block of the
  flattened rows (x's dims before d of size 1, and d's shards as the flattened rows'), else x
  is redistributed to ``Replicate()`` on that mesh dim (out-of-place ops) or the op raises.
* RoPE ``positions`` shaped like x's leading dims (``[B, S]``, Transformers' position_ids)
  take x's placements dim for dim, ``Replicate()`` on a broadcast dim of 1.

Why the sharding-propagator hook and not ``torch.distributed.tensor.experimental.
register_sharding``: that public wrapper (torch 2.15) expands a one-mesh-dim rule to every
mesh dim and takes the cheapest combination, which on a 2-D mesh may redistribute an argument
the op writes in place (the write would land in a temporary), and it hashes no non-tensor
argument of ops without an int argument into its cache, while the quant ops' ``scale``
decides whether ``scales`` is per-row. The hook it wraps,
``DTensor._op_dispatcher.sharding_propagator.register_op_strategy``, is what PyTorch's own
ops use; the one strategy per call registered here is chosen directly from x's placements.

Autograd: the Autograd kernels of rms_norm / qk_norm (C++) run above DTensor's dispatch
(Python key), so they see DTensors, save them, and their backward calls the backward ops
on DTensors, which reach the rules here.
"""

import sys

import torch

__all__ = ["registered_ops"]

_OPS = ("rms_norm", "add_rms_norm", "qk_norm_", "qk_norm", "rms_norm_quant",
        "add_rms_norm_quant", "rms_norm_backward", "qk_norm_backward")


def registered_ops():
    """The names of the glmnorm ops with a DTensor sharding rule: all of them once
    torch.distributed.tensor is imported (the rules are registered then), [] before, and
    where torch.distributed is unavailable in this build of torch."""
    return list(_registered)


_registered = []


# Per op: the index of the normalised (row) tensor, whether the op writes it in place, the
# other tensor arguments by role, and the role of each output.
#   "rows": same shape as x (redistributed to / given x's placements)
#   "repl": Replicate (weights, RoPE tables, a static scale's [1] output)
#   "vec":  1-D per-row vector (positions; per-row scales), or positions shaped like x's
#           leading dims, placed as x
#   "grad": weight gradient (Partial where x is row-sharded)
_RULES = {
    "rms_norm": dict(mutates=False, args={0: "rows", 1: "repl"}, outs=["rows"]),
    "add_rms_norm": dict(mutates=True, args={0: "rows", 1: "rows", 2: "repl"}, outs=["rows"]),
    "qk_norm_": dict(mutates=True, args={0: "rows", 1: "repl", 2: "repl", 11: "repl",
                                         12: "repl", 13: "vec"}, outs=[]),
    "qk_norm": dict(mutates=False, args={0: "rows", 1: "repl", 2: "repl", 11: "repl",
                                         12: "repl", 13: "vec"}, outs=["rows"]),
    "rms_norm_quant": dict(mutates=False, args={0: "rows", 1: "repl"}, outs=["rows", "scales"]),
    "add_rms_norm_quant": dict(mutates=True, args={0: "rows", 1: "rows", 2: "repl"},
                               outs=["rows", "scales"]),
    "rms_norm_backward": dict(mutates=False, args={0: "rows", 1: "repl", 2: "rows"},
                              outs=["rows", "grad"]),
    "qk_norm_backward": dict(mutates=False, args={0: "rows", 1: "repl", 2: "repl", 3: "rows",
                                                  12: "repl", 13: "repl", 14: "vec"},
                             outs=["rows", "grad", "grad"]),
}


def _arg(op_schema, index):
    """Argument `index` of the call (positional, by name, or the schema's default)."""
    if index < len(op_schema.args_schema):
        return op_schema.args_schema[index]
    schema_arg = op_schema.op._schema.arguments[index]
    if schema_arg.name in op_schema.kwargs_schema:
        return op_schema.kwargs_schema[schema_arg.name]
    return schema_arg.default_value if schema_arg.has_default_value() else None


def _describe(placements):
    return "(" + ", ".join(repr(p) for p in placements) + ")"


def _strategy_for(name, rule):
    from torch.distributed.tensor import Partial, Replicate
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._op_schema import OpSpec, OpStrategy
    from torch.distributed.tensor._ops.utils import generate_redistribute_costs
    from torch.distributed.tensor.placement_types import _StridedShard

    def strategy(op_schema):
        main = _arg(op_schema, 0)
        if not isinstance(main, OpStrategy):
            # Only a weight / table is a DTensor: the op still runs on the full x on every
            # rank, so those must be replicated; outputs replicated.
            mesh = op_schema.get_mesh_from_args()
            placements = tuple(Replicate() for _ in range(mesh.ndim))
            shape = None
        else:
            main_spec = main.strategies[0].output_spec
            mesh = main_spec.mesh
            placements = tuple(main_spec.placements)
            shape = tuple(main_spec.tensor_meta.shape)
        argname = op_schema.op._schema.arguments[0].name
        ndim = len(shape) if shape is not None else 0
        last = ndim - 1
        # Positions shaped like x's leading dims ([B, S] of [B, S, W], a dim of 1 broadcast)
        # shard with x, dim for dim; a 1-D per-row tensor's shards must match x's shards of
        # the flattened rows. Positions of any other shape are replicated (the library then
        # names the full shapes in its error).
        lead_shaped = {}  # arg index -> its shape, for the positions shaped like x's
        per_row = False
        for i, role in rule["args"].items():
            a = _arg(op_schema, i)
            if role != "vec" or a is None:
                continue
            p_shape = tuple(a.strategies[0].output_spec.tensor_meta.shape) \
                if isinstance(a, OpStrategy) else None
            if p_shape is None or len(p_shape) == 1:
                per_row = True
            elif shape is not None and len(p_shape) == ndim - 1 and all(
                    p in (s, 1) for p, s in zip(p_shape, shape)):
                lead_shaped[i] = p_shape
        if "scales" in rule["outs"]:
            scale_index = [a.name for a in op_schema.op._schema.arguments].index("scale")
            per_row = per_row or _arg(op_schema, scale_index) is None
        names = [a.name for a in op_schema.op._schema.arguments]
        rope = "rotary_dim" in names and (_arg(op_schema, names.index("rotary_dim")) or 0) > 0
        positions_missing = rope and _arg(op_schema, names.index("positions")) is None

        target = []
        vec = []  # placement of per-row 1-D tensors, per mesh dim
        for mesh_dim, p in enumerate(placements):
            why = None
            if p.is_replicate():
                target.append(p)
                vec.append(Replicate())
                continue
            if p.is_partial():
                why = "a partial sum (the norm is not linear)"
            else:
                d = p.dim
                if d == last:
                    why = "sharded on the normalised (last) dim"
                elif positions_missing:
                    why = ("row-sharded with RoPE and no positions (each rank would rotate "
                           "its rows by their local index; pass positions)")
                elif per_row and not _rows_block(shape, d, p, mesh):
                    why = ("sharded on a dim whose shards are not contiguous blocks of the "
                           "flattened rows, which the 1-D per-row tensor (scales / positions) "
                           "would need")
            if why is None:
                target.append(p)
                vec.append(type(p)(0) if not isinstance(p, _StridedShard) else Replicate())
                continue
            if rule["mutates"]:
                raise RuntimeError(
                    f"glmnorm: torch.ops.glmnorm.{name}: argument '{argname}' has placement "
                    f"{p!r} on mesh dim {mesh_dim} (placements {_describe(placements)}), "
                    f"{why}; the op updates '{argname}' in place, so it cannot be "
                    f"redistributed. Redistribute it first (e.g. to Shard(0) or Replicate()), "
                    f"see docs/DISTRIBUTED.md")
            # Out-of-place: DTensor redistributes x (all-gather / all-reduce on that mesh dim).
            target.append(Replicate())
            vec.append(Replicate())

        def spec(ps):
            return DTensorSpec(mesh, tuple(ps))

        row_spec = spec(target)
        input_specs, costs = [], []
        for i, role in sorted(rule["args"].items()):
            a = _arg(op_schema, i)
            if not isinstance(a, OpStrategy):
                continue
            if role == "vec" and i in lead_shaped:
                # x's placements; a broadcast dim (1 in positions) is replicated.
                want = spec([Replicate() if t.is_shard() and lead_shaped[i][t.dim] == 1
                             and shape[t.dim] != 1 else t for t in target])
            elif role == "vec" and len(_arg(op_schema, i).strategies[0].output_spec
                                       .tensor_meta.shape) > 1:
                want = spec([Replicate()] * mesh.ndim)  # a shape the library will refuse
            else:
                want = {"rows": row_spec, "repl": spec([Replicate()] * mesh.ndim),
                        "vec": spec(vec)}[role]
            input_specs.append(want)
            costs.append(generate_redistribute_costs(a, want))
        grad = [Partial() if not t.is_replicate() else Replicate() for t in target]
        outs = []
        for role in rule["outs"]:
            if role == "rows":
                outs.append(row_spec)
            elif role == "grad":
                outs.append(spec(grad))
            else:  # scales: per row, or [1] for a static scale
                outs.append(spec(vec) if per_row else spec([Replicate()] * mesh.ndim))
        output_specs = None if not outs else outs[0] if len(outs) == 1 else tuple(outs)
        return OpStrategy([OpSpec(output_specs=output_specs, input_specs=input_specs,
                                  redistribute_cost=costs)])

    return strategy


def _rows_block(shape, d, placement, mesh):
    """True when sharding dim d of `shape` (x [..., D]) gives each rank a contiguous block of
    the flattened rows that torch.chunk of the 1-D [rows] tensor would give it too."""
    from torch.distributed.tensor.placement_types import _StridedShard
    if isinstance(placement, _StridedShard) or any(s != 1 for s in shape[:d]):
        return False
    inner = 1
    for s in shape[d + 1:-1]:
        inner *= s
    # With inner == 1 the shards are the same chunks; otherwise only an even split keeps
    # torch.chunk(rows) and torch.chunk(dim d) * inner equal.
    return inner == 1 or shape[d] % mesh.size() == 0


def _register():
    if _registered:
        return
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo

    propagator = DTensor._op_dispatcher.sharding_propagator
    for name in _OPS:
        op = getattr(torch.ops.glmnorm, name).default
        # static_argnum=1: every non-tensor argument (eps, heads, rotary_dim, scale...) is
        # part of the sharding cache key; scale and rotary_dim change the strategy.
        propagator.register_op_strategy(op, _strategy_for(name, _RULES[name]),
                                        RuntimeSchemaInfo(static_argnum=1))
        _registered.append(name)


class _RegisterOnImport:
    """A sys.meta_path finder that registers the rules once torch.distributed.tensor has been
    imported: importing it here would add ~0.5 s to every ``import glmnorm.torch``, and a
    DTensor cannot exist before it is imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch.distributed.tensor":
            return None
        import importlib.machinery
        sys.meta_path.remove(self)  # find the real spec, once
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register()

        spec.loader.exec_module = exec_then_register
        return spec


if torch.distributed.is_available():
    if "torch.distributed.tensor" in sys.modules:
        _register()
    else:
        sys.meta_path.insert(0, _RegisterOnImport())
