"""A real S3-protocol server on 127.0.0.1 for the tests and benchmarks of data in object stores: moto's server mode
(which s3fs's own tests use), on a free port, from a thread; started and stopped by whoever uses it."""

from __future__ import annotations

import logging

__all__ = ["S3Server", "KEY", "SECRET"]

#: the credentials the server's clients use (moto accepts any; the tests check that none is ever written down)
KEY, SECRET = "AKIDCIRCUITOPTEST", "s3-s3cr3t-9876"


class S3Server:
    """moto's S3 server on a free port of 127.0.0.1, with the bucket ``bucket``; :meth:`options` are the storage
    options of its URLs (``s3://bucket/...``), credentials included."""

    def __init__(self, bucket: str = "bucket"):
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint, self.bucket = f"http://{host}:{port}", bucket
        self.filesystem().mkdir(bucket)

    def options(self, *, secrets: bool = True) -> dict:
        public = {"endpoint_url": self.endpoint}
        return {**public, "key": KEY, "secret": SECRET} if secrets else public

    def arguments(self) -> list[str]:
        """``--storage-option`` arguments of a command that reads or writes the server's URLs."""
        return ["--storage-option", *(f"{k}={v}" for k, v in self.options().items())]

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(**self.options(), skip_instance_cache=True)

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def stop(self) -> None:
        self.server.stop()
