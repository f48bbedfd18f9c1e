"""The client's spec grammar is the C++ operator table's (lathe/_ops.py, generated from
ir/op_registry.cc): every op's example has the C++ canonical form, and the keys, defaults and
choices behave as the C++ parser's. No daemon needed."""

import pytest

import lathe
from lathe import _ops
from lathe import workload as wl


def test_every_op_of_the_table_canonicalises_as_the_cpp_parser():
    assert len(_ops.OPS) == 16
    for op, (keys, example, canonical) in _ops.OPS.items():
        assert example.startswith(op + ":")
        assert lathe.canonical_workload(example) == canonical, op
        assert lathe.canonical_workload(canonical) == canonical, op
        for name, kind, default, flags, choices in keys:
            assert (kind == "choice") == bool(choices), (op, name)


def test_keys_the_old_copy_did_not_know():
    assert lathe.canonical_workload("matmul:m=64,n=64,k=32,bpanel=32") == \
        "matmul:bpanel=32,epilogue=none,k=32,m=64,n=64"
    assert lathe.canonical_workload("winograd_in:n=1,c=32,h=56,w=56,layout=nchw16c") == \
        "winograd_in:c=32,h=56,layout=nchw16c,m=4,n=1,pad=1,w=56"
    assert lathe.canonical_workload(
        "winograd_out:n=1,k=32,oh=56,ow=56,m=2,layout=nchw16c,epilogue=bias_relu") == \
        "winograd_out:epilogue=bias_relu,k=32,layout=nchw16c,m=2,n=1,oh=56,ow=56"
    # sepconv2d (a depthwise conv and the 1x1 reading it), as `lathe tune --model` stores it.
    assert lathe.canonical_workload(
        "sepconv2d:n=1,c=16,h=320,w=320,k=32,r=3,s=3,pad=1,layout=nchw16c,"
        "dw_epilogue=bias_hswish_scale_shift,epilogue=bias_hswish_scale_shift") == \
        "sepconv2d:c=16,dilation=1,dw_epilogue=bias_hswish_scale_shift," \
        "epilogue=bias_hswish_scale_shift,h=320,k=32,layout=nchw16c,n=1,pad=1,r=3,s=3," \
        "stride=1,w=320"
    # kblock equal to the layout's block is left out, as in C++.
    assert "kblock" not in lathe.canonical_workload(
        "conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nchw8c,kblock=8")


def test_bad_specs_name_the_part():
    with pytest.raises(lathe.BadSpec, match="missing key 'layout' for winograd_in"):
        lathe.canonical_workload("winograd_in:n=1,c=32,h=56,w=56")
    with pytest.raises(lathe.BadSpec, match="key 'm' of winograd_out must be one of 2, 4"):
        lathe.canonical_workload("winograd_out:n=1,k=32,oh=56,ow=56,m=3,layout=nchw16c")
    with pytest.raises(lathe.BadSpec, match="unknown key 'bpanel' for op conv2d"):
        lathe.canonical_workload("conv2d:n=1,c=3,h=8,w=8,k=4,r=3,s=3,bpanel=4")
    with pytest.raises(lathe.BadSpec, match="'bpanel' of matmul"):
        lathe.canonical_workload("matmul:m=4,n=4,k=4,bpanel=0")
