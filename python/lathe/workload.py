"""Workload specs as the tuning database keys them (CONTRACT.md "Workload specs").

`canonical(spec)` sorts the keys, fills in defaults, writes integers in plain decimal and
drops `dtype=float32`, as ir/workload.cc does; `key(canonical)` is the database's FNV-1a 64
key. Only `Database` needs these (a daemon canonicalises specs itself); the client's tests
compare them with the daemon's answers for every op. An op this table does not know is kept
as written, keys sorted: write its spec in canonical form (as `lathe query` prints it).
"""

from .errors import BadSpec

# op -> [(key, kind, default)]; kind: "pos" (positive int), "nonneg", "choice", "float".
_EPILOGUE = ("epilogue", "choice", "none")
_OPS = {
    "matmul": [("m", "pos", None), ("n", "pos", None), ("k", "pos", None), _EPILOGUE],
    "batch_matmul": [("b", "pos", None), ("m", "pos", None), ("n", "pos", None),
                     ("k", "pos", None), _EPILOGUE],
    "conv2d": [("n", "pos", None), ("c", "pos", None), ("h", "pos", None), ("w", "pos", None),
               ("k", "pos", None), ("r", "pos", None), ("s", "pos", None),
               ("stride", "pos", "1"), ("pad", "nonneg", "0"), ("dilation", "pos", "1"),
               ("groups", "pos", "1"), ("layout", "choice", "nchw"), _EPILOGUE],
    "pool2d": [("n", "pos", None), ("c", "pos", None), ("h", "pos", None), ("w", "pos", None),
               ("r", "pos", None), ("s", "pos", None), ("stride", "pos", "1"),
               ("pad", "nonneg", "0"), ("kind", "choice", "max"), ("layout", "choice", "nchw")],
    "softmax": [("m", "pos", None), ("n", "pos", None)],
    "layer_norm": [("m", "pos", None), ("n", "pos", None), ("eps", "float", "1e-05")],
}


def _fmt_float(v):
    """%.9g, as the C++ side prints eps."""
    return "%.9g" % v


def _value(op, key, kind, text):
    if kind in ("pos", "nonneg"):
        if not text.isdigit() or len(text) > 18:
            raise BadSpec(f"key '{key}' of {op} must be a "
                          f"{'positive' if kind == 'pos' else 'non-negative'} integer, got '{text}'")
        v = int(text)
        if kind == "pos" and v == 0:
            raise BadSpec(f"key '{key}' of {op} must be a positive integer, got '{text}'")
        return str(v)
    if kind == "float":
        try:
            v = float(text)
        except ValueError:
            raise BadSpec(f"key '{key}' of {op} must be a positive number, got '{text}'") from None
        if not (v > 0) or v == float("inf"):
            raise BadSpec(f"key '{key}' of {op} must be a positive number, got '{text}'")
        return _fmt_float(v)
    return text


def canonical(spec):
    """The canonical form of a workload spec; BadSpec naming the offending part."""
    if not isinstance(spec, str) or not spec:
        raise BadSpec("empty workload spec")
    if any(c.isspace() for c in spec):
        raise BadSpec(f"workload spec '{spec}' contains whitespace")
    op, _, rest = spec.partition(":")
    params = {}
    if rest or spec.endswith(":"):
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
    keys = _OPS.get(op)
    if keys is not None:
        known = {k for k, _, _ in keys}
        for k in params:
            if k not in known:
                raise BadSpec(f"unknown key '{k}' for op {op} "
                              f"(expected one of {', '.join([*known, 'dtype'])})")
        for k, kind, default in keys:
            if k in params:
                params[k] = _value(op, k, kind, params[k])
            elif default is None:
                raise BadSpec(f"missing key '{k}' for {op}")
            else:
                params[k] = default
    return op + ":" + ",".join(f"{k}={params[k]}" for k in sorted(params))


def key(canonical_spec):
    """The database key of a canonical spec: FNV-1a 64 of its bytes, 16 lowercase hex digits."""
    h = 14695981039346656037
    for b in canonical_spec.encode():
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h
