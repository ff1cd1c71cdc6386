from common import S3Server, put_objects


def test_s3_server_round_trip(s3: S3Server) -> None:
    put_objects(s3, "bkt", {"a/x.bin": b"hello"})
    body = s3.client().get_object(Bucket="bkt", Key="a/x.bin")["Body"].read()
    assert body == b"hello"
