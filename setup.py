"""Shim so that tools which still call setup.py work; all metadata lives in setup.cfg."""

from setuptools import setup

setup()
