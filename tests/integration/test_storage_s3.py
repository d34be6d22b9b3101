"""S3 through s3fs on moto's server: objects pinned at first contact and read with IfMatch (a
replaced object is a StaleSourceError naming it, never bytes of two versions), the client's
connection pool sized to our connection limit, anonymous access."""

from __future__ import annotations

import itertools
import json
import pickle
from pathlib import Path

import pytest

from episodestream import EpisodeStreamDataset, StaleSourceError, StorageError
from episodestream.storage import FsspecRangeReader, Limits, ReadRequest, open_reader
from tests.plugins.storage import S3Stand

pytestmark = pytest.mark.timeout(180)

_buckets = itertools.count()
KEY = "videos/cam/file-000.mp4"
DATA = bytes(range(256)) * 1000  # 256,000 bytes
SAME_SIZE = bytes(reversed(DATA))


def _bucket(s3: S3Stand, files: dict[str, bytes]) -> tuple[str, object]:
    name = f"pin-{next(_buckets)}"
    client = s3.client()
    client.create_bucket(Bucket=name)
    for key, data in files.items():
        client.put_object(Bucket=name, Key=f"ds/{key}", Body=data)
    return name, client


def test_a_replaced_object_is_stale_on_the_next_read(s3_server: S3Stand):
    bucket, client = _bucket(s3_server, {KEY: DATA})
    with FsspecRangeReader(f"s3://{bucket}/ds", storage_options=s3_server.storage_options) as r:
        assert r.read(KEY, 0, 100) == DATA[:100]
        # same size, different bytes: only the ETag tells them apart
        client.put_object(Bucket=bucket, Key=f"ds/{KEY}", Body=SAME_SIZE)
        with pytest.raises(StaleSourceError) as error:
            r.read(KEY, 1000, 100)
        assert KEY in str(error.value) and "bytes 1000-1099" in str(error.value)
        # refused by the store (412 to IfMatch), before any byte of the new version came
        assert "no longer has ETag" in str(error.value)
        with pytest.raises(StaleSourceError, match=r"file-000\.mp4"):
            r.read_many([ReadRequest(KEY, 5, 10), ReadRequest(KEY, 90_000, 5000)])
        with pytest.raises(StaleSourceError):
            r.read_file(KEY)
        assert r.metrics()["failures"] >= 3


def test_the_pin_is_taken_at_first_contact_and_travels(s3_server: S3Stand):
    bucket, client = _bucket(s3_server, {KEY: DATA, "meta/info.json": b"{}"})
    with FsspecRangeReader(f"s3://{bucket}/ds", storage_options=s3_server.storage_options) as r:
        pinned = r.file_info(KEY)  # a HeadObject pins it
        assert pinned.size == len(DATA) and pinned.etag
        assert r.read_many([ReadRequest(KEY, 0, 10), ReadRequest(KEY, 200_000, 56_000)]) == [
            DATA[:10],
            DATA[200_000:],
        ]
        clone = pickle.loads(pickle.dumps(r))  # a DataLoader worker gets the pins
        client.put_object(Bucket=bucket, Key=f"ds/{KEY}", Body=DATA + b"more")
        with pytest.raises(StaleSourceError, match=r"file-000\.mp4"):
            r.read(KEY, 0, 10)
        assert r.file_info(KEY) == pinned  # what was first seen, not what is there now
        with clone, pytest.raises(StaleSourceError):
            clone.read(KEY, 0, 10)
        # an object never pinned is read as it is now
        assert r.read_file("meta/info.json") == b"{}"


def test_an_object_rewritten_with_the_same_bytes_is_not_stale(s3_server: S3Stand):
    bucket, client = _bucket(s3_server, {KEY: DATA})
    with FsspecRangeReader(f"s3://{bucket}/ds", storage_options=s3_server.storage_options) as r:
        assert r.read(KEY, 0, 10) == DATA[:10]
        client.put_object(Bucket=bucket, Key=f"ds/{KEY}", Body=DATA)  # same ETag (MD5)
        assert r.read(KEY, 10, 10) == DATA[10:20]


def test_empty_objects_read_whole(s3_server: S3Stand):
    bucket, _ = _bucket(s3_server, {"meta/empty.jsonl": b""})
    with FsspecRangeReader(f"s3://{bucket}/ds", storage_options=s3_server.storage_options) as r:
        assert r.read_file("meta/empty.jsonl") == b""
        assert r.size("meta/empty.jsonl") == 0


def _pool_size(reader: FsspecRangeReader) -> int:
    fs, _ = reader._filesystem()
    client = fs.s3  # the aiobotocore client s3fs made
    assert client._client_config.max_pool_connections == (
        client._endpoint.http_session._max_pool_connections
    )
    return client._endpoint.http_session._max_pool_connections


def test_the_connection_pool_is_sized_to_our_limit(s3_server: S3Stand):
    bucket, _ = _bucket(s3_server, {KEY: DATA})
    url = f"s3://{bucket}/ds"
    options = s3_server.storage_options
    limits = Limits(max_connections_per_host=5, max_concurrency=3)
    with FsspecRangeReader(url, storage_options=options, limits=limits) as reader:
        assert reader.read(KEY, 0, 4) == DATA[:4]
        assert _pool_size(reader) == 5
        assert reader._max_concurrency == 3
    with FsspecRangeReader(url, storage_options=options, max_concurrency=24) as reader:
        assert _pool_size(reader) == 24  # botocore alone would keep 10
    # through open_reader, as EpisodeStreamDataset(reader_options=...) passes them
    with open_reader(url, storage_options=options, limits=Limits(max_connections_per_host=32)) as r:
        assert _pool_size(r) == 32
        requests = [ReadRequest(KEY, 1000 * i, 1000) for i in range(64)]
        assert r.read_many(requests) == [DATA[q.offset : q.end] for q in requests]
    explicit = {**options, "config_kwargs": {"max_pool_connections": 7}}
    with FsspecRangeReader(url, storage_options=explicit, limits=limits) as reader:
        assert _pool_size(reader) == 7  # the user's own setting wins
    assert options.get("config_kwargs") is None  # the caller's dict is left alone


def test_anonymous_access(s3_server: S3Stand):
    """A public bucket read without credentials (unsigned requests); a private one refuses."""
    bucket, client = _bucket(s3_server, {KEY: DATA})
    anonymous = {
        "anon": True,
        "endpoint_url": s3_server.endpoint_url,
        "client_kwargs": {"region_name": "us-east-1"},
    }
    with (
        FsspecRangeReader(f"s3://{bucket}/ds", storage_options=anonymous) as reader,
        pytest.raises(StorageError, match="access denied"),
    ):
        reader.read(KEY, 7, 9)
    public = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
            }
        ],
    }
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(public))
    with FsspecRangeReader(f"s3://{bucket}/ds", storage_options=anonymous) as reader:
        assert reader.read(KEY, 7, 9) == DATA[7:16]
        assert reader.read_many([ReadRequest(KEY, 0, 3), ReadRequest(KEY, 9, 2)]) == [
            DATA[:3],
            DATA[9:11],
        ]


def test_a_dataset_whose_video_is_replaced_mid_run_stops_naming_it(
    s3_server: S3Stand, lerobot_fixture_root: Path, tmp_path: Path
):
    files = {
        str(p.relative_to(lerobot_fixture_root)): p.read_bytes()
        for p in sorted(lerobot_fixture_root.rglob("*"))
        if p.is_file()
    }
    bucket, client = _bucket(s3_server, files)
    video = "videos/observation.images.cam_high/chunk-000/file-002.mp4"
    with EpisodeStreamDataset(
        f"s3://{bucket}/ds",
        cache_dir=tmp_path / "cache",
        image_dtype="uint8",
        reader_options={"storage_options": s3_server.storage_options},
    ) as dataset:
        dataset[0]
        changed = bytearray(files[video])
        changed[-100] ^= 0xFF  # one byte of the last frame: same size, another ETag
        client.put_object(Bucket=bucket, Key=f"ds/{video}", Body=bytes(changed))
        with pytest.raises(StaleSourceError) as error:
            for index in range(len(dataset)):
                dataset[index]
    assert video in str(error.value)
