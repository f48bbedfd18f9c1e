"""Builds the lathe package with its gRPC stubs (see pyproject.toml).

The stubs (lathe/v1/*_pb2.py, *_pb2_grpc.py) are generated from the repository's proto/
directory by grpcio-tools (a build requirement) into the build directory, so the wheel carries
them and the source tree stays clean. The package then requires grpcio and protobuf at least
at the versions that generated them: newer generated code refuses older runtimes.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = ("lathe/v1/trace.proto", "lathe/v1/measure.proto", "lathe/v1/service.proto")


def proto_dir():
    """proto/ next to this file (an sdist's copy) or the repository's (../proto)."""
    for d in (os.path.join(HERE, "proto"), os.path.join(HERE, os.pardir, "proto")):
        if all(os.path.isfile(os.path.join(d, p)) for p in PROTOS):
            return os.path.abspath(d)
    raise SystemExit("lathe: the .proto files are not found in ./proto or ../proto; build the "
                     "package from the lathe repository (pip install ./python)")


def major_minor(version):
    return ".".join(version.split(".")[:2])


def requirements():
    """grpcio and protobuf at least at the versions of this build's grpcio-tools."""
    try:
        from importlib.metadata import version
        tools, protobuf = version("grpcio-tools"), version("protobuf")
    except Exception:  # metadata asked for outside the build environment
        return ["grpcio>=1.51", "protobuf>=4.21"]
    major = int(protobuf.split(".")[0])
    return [f"grpcio>={major_minor(tools)}", f"protobuf>={major_minor(protobuf)},<{major + 1}"]


class BuildPyWithStubs(build_py):
    """build_py, then protoc --python_out --grpc_python_out into the build directory."""

    def run(self):
        super().run()
        import grpc_tools
        from grpc_tools import protoc

        src = proto_dir()
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        out = os.path.abspath(self.build_lib)
        os.makedirs(os.path.join(out, "lathe", "v1"), exist_ok=True)
        args = ["grpc_tools.protoc", f"-I{src}", f"-I{include}", f"--python_out={out}",
                f"--grpc_python_out={out}", *PROTOS]
        if protoc.main(args) != 0:
            raise SystemExit(f"lathe: protoc failed on {', '.join(PROTOS)} in {src}")
        open(os.path.join(out, "lathe", "v1", "__init__.py"), "a").close()


setup(install_requires=requirements(), cmdclass={"build_py": BuildPyWithStubs})
