#!/usr/bin/env bash
# The test python_op_table: the spec table that pip packages (python/lathe/_ops.py) must be
# the one the build generates from ir/op_registry.cc. Usage: check_op_table.sh COPY GENERATED
diff -u "$1" "$2" && exit 0
echo "$1 differs from the operator table of ir/op_registry.cc; regenerate it: cp $2 $1" >&2
exit 1
