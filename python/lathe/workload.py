"""Workload specs as the tuning database keys them (CONTRACT.md "Workload specs").

`canonical(spec)` mirrors ir/workload.cc: keys sorted, defaults filled in (keys added later
are left out while they hold their default), integers and AxB lists in plain decimal with
equal halves folded ("2x2" -> "2"), `dtype=float32` dropped; `key(canonical)` is the
database's FNV-1a 64 key. Only `Database` needs these (a daemon canonicalises specs itself);
the client's tests compare them with the daemon's answers for every op. Two things are
taken as written: epilogue expressions (write them as `lathe query` prints them, e.g.
`bias_relu`) and ops this table does not know (keys sorted, nothing filled in). When a spec
written that way misses, Database also matches it against the stored specs of its op.
"""

from .errors import BadSpec

from ._ops import MAX_EXTENT, OPS

# The table of ir/op_registry.cc, generated into _ops.py at build time (tools/op_table_main.cc):
# {op: ((key, kind, default or None, flags, choices), ...)}. Kinds: "pos", "nonneg" (integers),
# "choice", "float", "pair" (N or HxW), "pads" (N, HxW or TxLxBxR), "shape", "indices",
# "shapes" (shapes joined by '+'), "epilogue" (as written), "layout"; flags "omit" (left out
# while default), "opt" (optional without a default), "layout_block" (left out while equal to
# the layout's channel block).
_OPS = {op: keys for op, (keys, _example, _canonical) in OPS.items()}


def _dims(op, key, text, positive, min_rank, max_rank):
    parts = text.split("x")
    out = []
    for p in parts:
        if not p.isdigit() or len(p) > 18 or (positive and int(p) == 0) or int(p) > MAX_EXTENT:
            raise BadSpec(f"key '{key}' of {op} has a bad value '{text}'")
        out.append(int(p))
    if not min_rank <= len(out) <= max_rank:
        raise BadSpec(f"key '{key}' of {op} has a bad value '{text}'")
    return out


def _value(op, key, kind, text, choices=()):
    """The canonical text of one value (ir/workload.cc CanonicalValue)."""
    if kind in ("pos", "nonneg"):
        v = _dims(op, key, text, kind == "pos", 1, 1)[0]
        return str(v)
    if kind == "float":
        try:
            v = float(text)
        except ValueError:
            raise BadSpec(f"key '{key}' of {op} must be a positive number, got '{text}'") from None
        if not (0 < v < float("inf")):
            raise BadSpec(f"key '{key}' of {op} must be a positive number, got '{text}'")
        return "%.9g" % v
    if kind == "pair":
        d = _dims(op, key, text, True, 1, 2)
        if len(d) == 2 and d[0] == d[1]:
            d = d[:1]
        return "x".join(map(str, d))
    if kind == "pads":
        d = _dims(op, key, text, False, 1, 4)
        if len(d) == 3:
            raise BadSpec(f"key '{key}' of {op} has a bad value '{text}'")
        if len(d) == 2:
            d = [d[0], d[1], d[0], d[1]]
        if len(d) == 4 and d[0] == d[2] and d[1] == d[3]:
            d = d[:2]
        if len(d) == 2 and d[0] == d[1]:
            d = d[:1]
        return "x".join(map(str, d))
    if kind == "shape":
        return "x".join(map(str, _dims(op, key, text, True, 1, 8)))
    if kind == "indices":
        return "x".join(map(str, _dims(op, key, text, False, 1, 8)))
    if kind == "shapes":
        return "+".join("x".join(map(str, _dims(op, key, p, True, 1, 8)))
                        for p in text.split("+"))
    if kind == "layout":  # nchw{x}c with the block as a plain number (ir/ops.cc LayoutBlock)
        b = _layout_block(text)
        return f"nchw{b}c" if b else text
    if kind == "choice" and text not in choices:
        raise BadSpec(f"key '{key}' of {op} must be one of {', '.join(choices)}, got '{text}'")
    return text  # a choice, an epilogue (as written)


def _layout_block(text):
    """The channel block of a layout: 0 for nchw/nhwc (and what the daemon will refuse)."""
    if len(text) > 5 and text.startswith("nchw") and text.endswith("c") and text[4:-1].isdigit():
        b = int(text[4:-1])
        if 1 <= b <= 1024:
            return b
    return 0


def parse(spec):
    """(op, {key: value}) of a spec as written; BadSpec for malformed text."""
    if not isinstance(spec, str) or not spec:
        raise BadSpec("empty workload spec")
    if any(c.isspace() for c in spec):
        raise BadSpec(f"workload spec '{spec}' contains whitespace")
    op, colon, rest = spec.partition(":")
    params = {}
    if colon:
        for entry in rest.split(","):
            if not entry:
                raise BadSpec(f"empty entry in workload spec '{spec}'")
            k, eq, v = entry.partition("=")
            if not eq or not k:
                raise BadSpec(f"malformed entry '{entry}' for op {op} (expected key=value)")
            if k in params:
                raise BadSpec(f"duplicate key '{k}' for op {op}")
            if not v:
                raise BadSpec(f"empty value for key '{k}' of {op}")
            params[k] = v
    dtype = params.pop("dtype", "float32")
    if dtype != "float32":
        raise BadSpec(f"unsupported dtype '{dtype}' for op {op} (only float32 is supported)")
    return op, params


def canonical_params(op, params):
    """The canonical {key: value} of a parsed spec (see the module comment)."""
    keys = _OPS.get(op)
    if keys is None:
        return {k: (str(int(v)) if v.isdigit() and len(v) <= 18 else v)
                for k, v in params.items()}
    params = dict(params)
    known = [k[0] for k in keys]
    for k in params:
        if k not in known:
            raise BadSpec(f"unknown key '{k}' for op {op} "
                          f"(expected one of {', '.join([*known, 'dtype'])})")
    for k, kind, default, flags, choices in keys:
        if k in params:
            params[k] = _value(op, k, kind, params[k], choices)
            if "omit" in flags and params[k] == default:
                del params[k]
        elif "omit" in flags or "opt" in flags:
            continue
        elif default is None:
            raise BadSpec(f"missing key '{k}' for {op}")
        else:
            params[k] = default
    # A key whose default is the layout's channel block (conv2d's kblock; ir/workload.cc).
    for k, _, _, flags, _ in keys:
        if "layout_block" in flags and k in params and \
                params[k] == str(_layout_block(params.get("layout", ""))):
            del params[k]
    return params


def canonical(spec):
    """The canonical form of a workload spec; BadSpec naming the offending part."""
    op, params = parse(spec)
    params = canonical_params(op, params)
    return op + ":" + ",".join(f"{k}={params[k]}" for k in sorted(params))


def key(canonical_spec):
    """The database key of a canonical spec: FNV-1a 64 of its bytes, 16 lowercase hex digits."""
    h = 14695981039346656037
    for b in canonical_spec.encode():
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h
