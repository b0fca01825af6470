"""Packages, and the top-level ``cl_kernels/`` (OpenCL C sources) shipped inside the package as
``functrace/cl_kernels`` (a mapping setup.cfg cannot combine with package discovery).  The rest of
the metadata is in setup.cfg."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["functrace", "functrace.*"]) + ["functrace.cl_kernels"],
      package_dir={"functrace.cl_kernels": "cl_kernels"})
