"""CORS (issue 32, part 2): Put/Get/DeleteBucketCors with S3's checks, preflights answered from the
rules (a refusal is `403 CORSResponse`), the `Access-Control-*` headers on every answer to a
browser's request (errors included), and a real browser: Debian's headless Chromium loads a page
from another origin that uploads with a presigned PUT and reads back with `fetch`; an allowed
origin works, a refused one is blocked by the browser itself. Runs against the session's
server(s) (in cluster mode the rules are set through one gateway and enforced by the other)."""

import http.server
import json
import threading
import time
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

from test_dashboard import CHROMIUM, chromium  # noqa: F401 (the fixture)


def err(e):
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def xml_code(r):
    return r.text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in r.text else None


def test_cors_configuration_calls_and_checks(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert err(e) == (404, "NoSuchCORSConfiguration")
    rules = [
        {"ID": "uploads", "AllowedMethods": ["PUT", "POST"], "AllowedOrigins": ["https://*.example.com"],
         "AllowedHeaders": ["content-type", "x-amz-meta-*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600},
        {"AllowedMethods": ["GET", "HEAD"], "AllowedOrigins": ["*"]},
    ]
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == rules
    for bad, code, why in (
        ([{"AllowedMethods": ["PATCH"], "AllowedOrigins": ["*"]}], "InvalidRequest", "Unsupported method is PATCH"),
        ([{"AllowedMethods": ["GET"], "AllowedOrigins": ["http://*.a.*"]}], "InvalidRequest", "more than one wildcard"),
        ([{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], "AllowedHeaders": ["x-*-*"]}], "InvalidRequest", "more than one wildcard"),
        ([{"AllowedMethods": ["GET"], "AllowedOrigins": ["*"]}] * 101, "InvalidRequest", "100 rules"),
    ):
        with pytest.raises(ClientError) as e:
            s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": bad})
        assert err(e) == (400, code) and why in e.value.response["Error"]["Message"], bad[:1]
        assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == rules
    s3.delete_bucket_cors(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert err(e) == (404, "NoSuchCORSConfiguration")


def test_preflights_and_headers_follow_the_rules(lode_servers, s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"data")
    base = lambda i: f"{lode_servers[i % len(lode_servers)].endpoint}/{bucket}"  # noqa: E731
    # No rules yet: a preflight is refused, a browser's GET gets no CORS headers.
    r = requests.options(base(0) + "/o", headers={"Origin": "http://a.test", "Access-Control-Request-Method": "GET"})
    assert (r.status_code, xml_code(r)) == (403, "CORSResponse")
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedMethods": ["GET"], "AllowedOrigins": ["*suffix"]},
        {"AllowedMethods": ["GET"], "AllowedOrigins": ["start*end"], "ExposeHeaders": ["ETag", "x-amz-meta-a"], "MaxAgeSeconds": 90},
        {"AllowedMethods": ["PUT", "GET"], "AllowedOrigins": ["http://up.test"], "AllowedHeaders": ["content-type", "x-amz-*"]},
        {"AllowedMethods": ["HEAD"], "AllowedOrigins": ["*"]},
    ]})
    # The other gateway (cluster mode) follows at once: every check below alternates.
    checks = [
        # (method, path, headers, status, allow-origin, allow-methods)
        ("OPTIONS", "/o", {}, 400, None, None),
        ("OPTIONS", "/o", {"Origin": "foo.suffix"}, 400, None, None),
        ("OPTIONS", "/o", {"Origin": "foo.suffix", "Access-Control-Request-Method": "GET"}, 200, "foo.suffix", "GET"),
        ("OPTIONS", "/o", {"Origin": "foo.bar", "Access-Control-Request-Method": "GET"}, 403, None, None),
        ("OPTIONS", "/o", {"Origin": "0start12end", "Access-Control-Request-Method": "GET"}, 403, None, None),
        ("OPTIONS", "/o", {"Origin": "start12end", "Access-Control-Request-Method": "GET"}, 200, "start12end", "GET"),
        ("OPTIONS", "/o", {"Origin": "foo.suffix", "Access-Control-Request-Method": "PUT"}, 403, None, None),
        ("OPTIONS", "/o", {"Origin": "http://up.test", "Access-Control-Request-Method": "PUT",
                           "Access-Control-Request-Headers": "Content-Type, x-amz-meta-label"}, 200, "http://up.test", "PUT, GET"),
        ("OPTIONS", "/o", {"Origin": "http://up.test", "Access-Control-Request-Method": "PUT",
                           "Access-Control-Request-Headers": "content-type, authorization"}, 403, None, None),
        ("OPTIONS", "/o", {"Origin": "http://any.test", "Access-Control-Request-Method": "HEAD"}, 200, "*", "HEAD"),
        # Actual requests (unsigned: refused by auth, and still decorated, as S3 does).
        ("GET", "/o", {}, 403, None, None),
        ("GET", "/o", {"Origin": "foo.suffix"}, 403, "foo.suffix", "GET"),
        ("GET", "/missing", {"Origin": "start1end"}, 403, "start1end", "GET"),
        ("GET", "/o", {"Origin": "foo.bar"}, 403, None, None),
        ("PUT", "/o", {"Origin": "foo.suffix", "Content-Length": "0"}, 403, None, None),
    ]
    for n, (method, path, headers, status, origin, methods) in enumerate(checks):
        r = requests.request(method, base(n) + path, headers=headers)
        assert r.status_code == status, (method, headers, r.status_code, r.text)
        assert r.headers.get("access-control-allow-origin") == origin, (method, headers, r.headers)
        assert r.headers.get("access-control-allow-methods") == methods, (method, headers, r.headers)
        if origin is not None:
            assert r.headers["vary"] == "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
            assert ("access-control-allow-credentials" in r.headers) == (origin != "*")
        if status == 403 and method == "OPTIONS":
            assert xml_code(r) == "CORSResponse"
    # A preflight's details: requested headers echoed, exposed headers, max age.
    r = requests.options(base(1) + "/o", headers={"Origin": "start1end", "Access-Control-Request-Method": "GET"})
    assert r.headers["access-control-expose-headers"] == "ETag, x-amz-meta-a"
    assert r.headers["access-control-max-age"] == "90"
    r = requests.options(base(0) + "/o", headers={"Origin": "http://up.test", "Access-Control-Request-Method": "PUT",
                                                  "Access-Control-Request-Headers": "Content-Type"})
    assert r.headers["access-control-allow-headers"] == "content-type"
    # A signed, successful GET from an allowed origin carries the headers too.
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "o"})
    r = requests.get(url, headers={"Origin": "x.suffix"})
    assert r.status_code == 200 and r.content == b"data" and r.headers["access-control-allow-origin"] == "x.suffix"
    # SDK traffic (no Origin) sees no CORS headers at all.
    r = requests.get(url)
    assert r.status_code == 200 and not any(h.lower().startswith("access-control") for h in r.headers)
    s3.delete_bucket_cors(Bucket=bucket)
    r = requests.options(base(1) + "/o", headers={"Origin": "foo.suffix", "Access-Control-Request-Method": "GET"})
    assert (r.status_code, xml_code(r)) == (403, "CORSResponse")


PAGE = """<!doctype html><html><body><script>
window.result = null;
(async () => {
  const out = {};
  try {
    const put = await fetch(%(put)s, {method: 'PUT', body: 'written by the browser', headers: {'Content-Type': 'text/plain'}});
    out.put_status = put.status;
    out.put_etag = put.headers.get('ETag');
  } catch (e) { out.put_error = String(e); }
  try {
    const get = await fetch(%(get)s);
    out.get_status = get.status;
    out.get_text = await get.text();
  } catch (e) { out.get_error = String(e); }
  window.result = out;
})();
</script></body></html>"""


def serve_page(html):
    """A page server on another port of 127.0.0.1: another origin than Lode's."""
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def run_page(dt, html):
    page = serve_page(html)
    try:
        origin = f"http://127.0.0.1:{page.server_address[1]}"
        dt.call("Page.navigate", url=origin + "/")
        deadline = time.time() + 30
        while (got := dt.evaluate("window.result")) is None:
            assert time.time() < deadline, "the page did not finish"
            time.sleep(0.1)
        return got
    finally:
        page.shutdown()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (setup.sh installs it)")
def test_a_browser_on_another_origin_uploads_and_reads_back(s3, bucket, chromium):  # noqa: F811
    dt = chromium
    for domain in ("Runtime", "Network", "Page"):
        dt.call(domain + ".enable")

    def page_for(put_key, get_key):
        put = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": put_key, "ContentType": "text/plain"})
        get = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": get_key})
        return PAGE % {"put": json.dumps(put), "get": json.dumps(get)}

    # Pages are served from other ports of 127.0.0.1: other origins than Lode's.
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedMethods": ["GET", "PUT"], "AllowedOrigins": ["http://127.0.0.1:*"], "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"]},
    ]})
    got = run_page(dt, page_for("from-browser.txt", "from-browser.txt"))
    assert got.get("put_status") == 200 and got.get("put_etag"), got
    assert got.get("get_status") == 200 and got.get("get_text") == "written by the browser", got
    stored = s3.get_object(Bucket=bucket, Key="from-browser.txt")
    assert stored["Body"].read() == b"written by the browser" and stored["ContentType"] == "text/plain"
    assert stored["ETag"] == got["put_etag"]
    # A refused origin: the rules name another host only; the browser blocks both calls itself
    # (the preflight of the PUT is refused, so its body is never sent; the GET's answer is
    # hidden from the page).
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedMethods": ["GET", "PUT"], "AllowedOrigins": ["https://labeling.example.com"], "AllowedHeaders": ["*"]},
    ]})
    s3.put_object(Bucket=bucket, Key="readable-by-sdk.txt", Body=b"sdk")
    html = page_for("refused.txt", "readable-by-sdk.txt")
    got = run_page(dt, html)
    assert "put_status" not in got and "Failed to fetch" in got.get("put_error", ""), got
    assert "get_status" not in got and "Failed to fetch" in got.get("get_error", ""), got
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="refused.txt")
    assert err(e)[0] == 404
    s3.delete_bucket_cors(Bucket=bucket)
