# The package version: the workspace's (Cargo.toml); python/tests/test_install_meta.py checks
# that they agree and that libumd reports the same.
__version__ = "0.1.0"
