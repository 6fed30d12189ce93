"""The service's access control beyond API keys: OIDC bearer tokens checked against an issuer's JWKS
served over real HTTP on 127.0.0.1 (roles and projects from claims, expiry, audience, a foreign
signature, a key rotation), per-caller rate limits, CORS preflights, and `agnitra serve` refusing an
issuer it cannot read. The API runs in this process under Uvicorn on 127.0.0.1 (a server process
would spend most of this file's time importing)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from sqlalchemy import select
from service_server import InThread, free_port

from agnitra.service import keys, queue
from agnitra.service.app import ServiceConfig, create_app
from agnitra.service.oidc import IssuerUnavailable, OidcSettings, OidcVerifier, TokenRefused
from agnitra.service.ratelimit import RateLimiter
from agnitra.store.service_schema import ApiKeyRow, ModelRow, ProjectRow

AUDIENCE = "agnitra-test"
QUICK_JOB = {"model_id": 1, "settings": {"budget": "12s", "transforms": ["threads"], "peers": []}}


class Issuer:
    """An OIDC issuer's discovery document and JWKS on 127.0.0.1; `publish` replaces its keys
    (a rotation); `reads` counts the JWKS fetches."""

    def __init__(self) -> None:
        self.jwks: list[dict] = []
        self.reads = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks"}
                elif self.path == "/jwks":
                    issuer.reads += 1
                    body = {"keys": issuer.jwks}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def publish(self, *pairs: tuple[str, object]) -> None:
        self.jwks = [dict(_public_jwk(key), kid=kid, use="sig") for kid, key in pairs]

    def token(self, key, kid: str, alg: str = "RS256", **claims) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "alice", "iat": now, "nbf": now, "exp": now + 300, **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg, headers={"kid": kid})


def _public_jwk(key) -> dict:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    return json.loads(algorithm.to_jwk(key.public_key()))


def _rsa():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Service:
    """The API under Uvicorn in a thread, on its own SQLite store, with a project `team` holding
    model 1, a project `other`, and an admin key."""

    def __init__(self, folder, **settings) -> None:
        self.app = create_app(ServiceConfig(f"sqlite:///{folder}/store.db", folder / "data", **settings))
        with self.app.state.store.session() as session:
            _, self.admin = keys.create_key(session, "admin", "admin")
            team, other = ProjectRow(name="team", created_at=queue.now()), ProjectRow(name="other", created_at=queue.now())
            session.add_all([team, other])
            session.flush()
            session.add(ModelRow(project_id=team.id, name="m", kind="zoo", spec="zoo:bert-base", options={}, sha256="", summary={}, created_at=queue.now()))
        self.running = InThread(self.app)
        self.url = self.running.url

    def client(self, credential: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {credential}"} if credential else {}, timeout=30)

    def stop(self) -> None:
        self.running.stop()
        self.app.state.store.close()


@pytest.fixture(scope="module")
def signing():
    return _rsa()


@pytest.fixture(scope="module")
def issuer(signing):
    running = Issuer()
    running.publish(("k1", signing))
    yield running
    running.http.shutdown()


@pytest.fixture(scope="module")
def with_oidc(issuer, tmp_path_factory):
    running = Service(tmp_path_factory.mktemp("oidc"), oidc=OidcSettings(issuer.url, AUDIENCE), rate_limit=0)
    yield running
    running.stop()


def test_tokens_grant_the_role_and_project_of_their_claims(issuer, with_oidc, signing):
    viewer = with_oidc.client(issuer.token(signing, "k1", agnitra_role="viewer"))
    assert viewer.get("/v1/projects").status_code == 200 and viewer.get("/v1/models/1").status_code == 200
    refused = viewer.post("/v1/jobs/optimize", json=QUICK_JOB)
    assert refused.status_code == 403 and refused.json()["detail"] == "this token (viewer) may not do this: it needs editor"
    editor = with_oidc.client(issuer.token(signing, "k1", sub="bob", agnitra_role=["viewer", "editor"]))
    made = editor.post("/v1/jobs/optimize", json=QUICK_JOB)
    assert made.status_code == 201, made.text
    elsewhere = with_oidc.client(issuer.token(signing, "k1", agnitra_role="editor", agnitra_project="other"))
    assert elsewhere.get("/v1/models/1").status_code == 403 and [p["name"] for p in elsewhere.get("/v1/projects").json()] == ["other"]
    no_role = with_oidc.client(issuer.token(signing, "k1")).get("/v1/projects")
    assert no_role.status_code == 403 and "'agnitra_role' claim is None" in no_role.text
    no_project = with_oidc.client(issuer.token(signing, "k1", agnitra_role="admin", agnitra_project="gone")).get("/v1/projects")
    assert no_project.status_code == 403 and "names project 'gone', which does not exist" in no_project.text
    # an API key works beside tokens; the audit log names the token's subject
    admin = with_oidc.client(with_oidc.admin)
    entry = admin.get("/v1/audit/logs").json()[0]
    assert entry["action"] == "job.submit" and entry["actor"] == "oidc:bob" and entry["key"] is None
    assert with_oidc.client(issuer.token(signing, "k1", agnitra_role="admin")).get("/v1/audit/logs").status_code == 200


@pytest.mark.parametrize("change, reason", [
    ({"exp": -60}, "the token has expired"),
    ({"aud": "someone-else"}, f"its audience is not '{AUDIENCE}'"),
    ({"iss": "https://elsewhere.example"}, "was not issued by"),
    ({"nbf": 3600}, "not valid yet"),
    ({"sub": None}, "has no 'sub' claim"),
    ({"signer": "other"}, "signature does not match"),
    ({"kid": "nobody"}, "names key 'nobody', which"),
    ({"alg": "HS256"}, "signed with 'HS256'"),
])
def test_a_bad_token_is_a_401_with_its_reason(issuer, with_oidc, signing, change, reason):
    now, claims = int(time.time()), {"agnitra_role": "admin"}
    for name in ("exp", "nbf"):
        if name in change:
            claims[name] = now + change[name]
    claims.update({k: v for k, v in change.items() if k in ("aud", "iss", "sub")})
    if change.get("alg") == "HS256":
        token = jwt.encode({"sub": "x", "exp": now + 60}, "a shared secret of thirty-two bytes!", algorithm="HS256", headers={"kid": "k1"})
    else:
        token = issuer.token(_rsa() if "signer" in change else signing, change.get("kid", "k1"), **claims)
    answer = with_oidc.client(token).get("/v1/projects")
    assert answer.status_code == 401 and reason in answer.json()["detail"] and "\n" not in answer.json()["detail"], answer.text
    assert answer.headers["www-authenticate"].startswith("Bearer")


def test_a_token_may_name_an_organisation(issuer, with_oidc, signing):
    admin = with_oidc.client(with_oidc.admin)
    assert admin.post("/v1/organisations", json={"name": "hooli"}).status_code == 201
    assert admin.post("/v1/projects", json={"name": "nucleus", "organisation": "hooli"}).status_code == 201
    member = with_oidc.client(issuer.token(signing, "k1", agnitra_role="viewer", agnitra_organisation="hooli"))
    assert [p["name"] for p in member.get("/v1/projects").json()] == ["nucleus"]
    gone = with_oidc.client(issuer.token(signing, "k1", agnitra_role="viewer", agnitra_organisation="pied-piper")).get("/v1/projects")
    assert gone.status_code == 403 and "names organisation 'pied-piper', which does not exist" in gone.text


def test_a_token_under_a_new_key_reads_the_jwks_again(issuer, with_oidc, signing, monkeypatch):
    """Last of the issuer's tests: k1 is withdrawn."""
    from agnitra.service import oidc

    monkeypatch.setattr(oidc, "REFRESH_FLOOR_S", 0.0)
    old, new = signing, ec.generate_private_key(ec.SECP256R1())
    assert with_oidc.client(issuer.token(old, "k1", agnitra_role="viewer")).get("/v1/projects").status_code == 200
    reads = issuer.reads
    assert with_oidc.client(issuer.token(old, "k1", agnitra_role="viewer")).get("/v1/projects").status_code == 200
    assert issuer.reads == reads  # a known key: no fetch
    issuer.publish(("k2", new))  # the issuer rotates to an ES256 key
    rotated = with_oidc.client(issuer.token(new, "k2", alg="ES256", agnitra_role="viewer")).get("/v1/projects")
    assert rotated.status_code == 200, rotated.text
    assert issuer.reads == reads + 1
    withdrawn = with_oidc.client(issuer.token(old, "k1", agnitra_role="viewer")).get("/v1/projects")
    assert withdrawn.status_code == 401 and "names key 'k1'" in withdrawn.text


def test_unknown_key_ids_read_the_jwks_at_most_once_a_floor():
    """Tokens naming made-up key ids cannot make the server hammer the issuer."""
    signing, now, reads = _rsa(), [100.0], []
    jwk = dict(_public_jwk(signing), kid="k1")

    def fetch(url):
        reads.append(url)
        if url.endswith("openid-configuration"):
            return {"issuer": "https://id.example", "jwks_uri": "https://id.example/jwks"}
        return {"keys": [jwk]}

    verifier = OidcVerifier(OidcSettings("https://id.example", AUDIENCE), fetch=fetch, clock=lambda: now[0])
    verifier.discover()
    assert reads == ["https://id.example/.well-known/openid-configuration", "https://id.example/jwks"]
    forged = jwt.encode({"sub": "x"}, signing, algorithm="RS256", headers={"kid": "made-up"})
    for _ in range(5):
        with pytest.raises(TokenRefused, match="names key 'made-up'"):
            verifier.claims(forged)
    assert len(reads) == 2  # within the floor of the last read
    now[0] += 6
    with pytest.raises(TokenRefused):
        verifier.claims(forged)
    assert len(reads) == 3
    with pytest.raises(IssuerUnavailable, match="names the issuer 'https://id.example', not 'https://other.example'"):
        OidcVerifier(OidcSettings("https://other.example", AUDIENCE), fetch=fetch).discover()


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    running = Service(tmp_path_factory.mktemp("limited"), rate_limit=3, cors_origins=["https://ui.example"])
    yield running
    running.stop()


def test_each_caller_has_its_own_rate_limit_and_health_has_none(limited):
    with limited.app.state.store.session() as session:
        _, other = keys.create_key(session, "other", "viewer")
    admin = limited.client(limited.admin)
    assert [admin.get("/v1/projects").status_code for _ in range(3)] == [200, 200, 200]
    over = admin.get("/v1/projects")
    assert over.status_code == 429 and 1 <= int(over.headers["retry-after"]) <= 20
    assert over.json()["detail"].startswith("over the rate limit of 3 requests a minute for this caller; retry in")
    assert limited.client(other).get("/v1/projects").status_code == 200  # another key: its own bucket
    assert all(limited.client().get("/v1/health").status_code == 200 for _ in range(5))
    assert limited.client().get("/metrics").status_code == 200
    token = jwt.encode({"sub": "x"}, _rsa(), algorithm="RS256")
    refused = limited.client(token).get("/v1/projects")  # no issuer configured: a JWT is not a key
    assert refused.status_code == 401 and "started without --oidc-issuer" in refused.text


def test_the_bucket_refills_at_the_limit_rate():
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])  # one a second, bursts of 60
    assert all(limiter.take("a") == 0 for _ in range(60))
    assert limiter.take("a") == pytest.approx(1.0)
    now[0] += 0.5
    assert limiter.take("a") == pytest.approx(0.5)
    now[0] += 0.5
    assert limiter.take("a") == 0 and limiter.take("a") == pytest.approx(1.0)
    assert limiter.take("b") == 0


def test_cors_preflight_from_an_allowed_origin_only(limited):
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization, Content-Type"}
    allowed = limited.client().options("/v1/jobs/optimize", headers={"Origin": "https://ui.example", **ask})
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "https://ui.example"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    foreign = limited.client().options("/v1/jobs/optimize", headers={"Origin": "https://evil.example", **ask})
    assert foreign.status_code == 400 and "access-control-allow-origin" not in foreign.headers
    read = limited.client().get("/v1/health", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in read.headers


def test_serve_refuses_an_issuer_it_cannot_use(tmp_path, monkeypatch, capsys):
    from agnitra.cli import main

    monkeypatch.setenv("AGNITRA_DB_URL", f"sqlite:///{tmp_path}/store.db")
    base = ["serve", "--data-dir", str(tmp_path / "data"), "--workers", "0"]
    assert main([*base, "--oidc-issuer", f"http://127.0.0.1:{free_port()}", "--oidc-audience", AUDIENCE]) == 2
    err = capsys.readouterr().err.strip()
    assert "the OIDC issuer http://127.0.0.1:" in err and "cannot be read" in err and "fix --oidc-issuer" in err and "\n" not in err, err
    monkeypatch.setenv("AGNITRA_OIDC_ISSUER", "https://id.example")
    assert main(base) == 2
    assert "pass --oidc-audience" in capsys.readouterr().err
    assert main([*base, "--rate-limit", "-1"]) == 2
    assert "--rate-limit must be a whole number >= 0" in capsys.readouterr().err


def test_older_audit_entries_name_their_key_after_the_migration(tmp_path):
    from agnitra.store import open_store
    from agnitra.store.db import downgrade, migrate

    store = open_store(f"sqlite:///{tmp_path}/store.db")
    downgrade(store.engine, "0003")  # before the audit log named its actor
    with store.engine.begin() as connection:
        connection.exec_driver_sql("INSERT INTO api_keys (id, name, prefix, digest, role, revoked, created_at) VALUES (7, 'k', 'agn_', 'd', 'admin', 0, '2026-01-01')")
        connection.exec_driver_sql("INSERT INTO audit_logs (at, key_id, action, target, detail) VALUES ('2026-01-01', 7, 'project.create', 'project:1', '{}'), "
                                   "('2026-01-01', NULL, 'keys.create', '', '{}')")
    migrate(store.engine)
    with store.engine.connect() as connection:
        assert [tuple(r) for r in connection.exec_driver_sql("SELECT key_id, actor FROM audit_logs ORDER BY id")] == [(7, "key:7"), (None, "")]
    store.close()


@pytest.fixture(scope="module")
def orgs(tmp_path_factory):
    running = Service(tmp_path_factory.mktemp("orgs"), rate_limit=0)
    yield running
    running.stop()


def test_organisations_scope_projects_keys_and_the_audit_log(orgs):
    admin = orgs.client(orgs.admin)
    for name in ("acme", "globex"):
        assert admin.post("/v1/organisations", json={"name": name}).status_code == 201
    assert admin.post("/v1/organisations", json={"name": "acme"}).status_code == 409
    assert admin.post("/v1/projects", json={"name": "rockets", "organisation": "acme"}).json()["organisation_id"] == 1
    assert admin.post("/v1/projects", json={"name": "widgets", "organisation": "globex"}).status_code == 201
    assert admin.post("/v1/projects", json={"name": "x", "organisation": "initech"}).status_code == 404
    with orgs.app.state.store.session() as session:
        _, acme_admin = keys.create_key(session, "acme admin", "admin", organisation="acme")
        _, acme_viewer = keys.create_key(session, "acme viewer", "viewer", organisation="acme")
        _, team_admin = keys.create_key(session, "team admin", "admin", project="team")
        rockets = session.scalar(select(ProjectRow.id).where(ProjectRow.name == "rockets"))
        widgets = session.scalar(select(ProjectRow.id).where(ProjectRow.name == "widgets"))
        for project_id in (rockets, widgets):
            session.add(ModelRow(project_id=project_id, name="m", kind="zoo", spec="zoo:bert-base", options={}, sha256="", summary={}, created_at=queue.now()))
        session.flush()
        rocket_model, widget_model = (session.scalar(select(ModelRow.id).where(ModelRow.project_id == p)) for p in (rockets, widgets))
    acme = orgs.client(acme_admin)
    # an organisation's admin makes projects in its own organisation only, and sees only its projects
    made = acme.post("/v1/projects", json={"name": "lasers"})
    assert made.status_code == 201 and made.json()["organisation_id"] == 1
    refused = acme.post("/v1/projects", json={"name": "y", "organisation": "globex"})
    assert refused.status_code == 403 and "covers organisation 1 only" in refused.text
    assert acme.post("/v1/organisations", json={"name": "umbrella"}).status_code == 403
    assert sorted(p["name"] for p in acme.get("/v1/projects").json()) == ["lasers", "rockets"]
    assert [o["name"] for o in acme.get("/v1/organisations").json()] == ["acme"]
    viewer = orgs.client(acme_viewer)
    assert viewer.get(f"/v1/models/{rocket_model}").status_code == 200
    foreign = viewer.get(f"/v1/models/{widget_model}")
    assert foreign.status_code == 403 and "viewer of organisation 1" in foreign.text
    assert {m["project_id"] for m in viewer.get("/v1/models").json()["models"]} == {rockets}
    # a project's admin cannot make projects or organisations
    team = orgs.client(team_admin)
    assert team.post("/v1/projects", json={"name": "z"}).status_code == 403 and team.post("/v1/organisations", json={"name": "z"}).status_code == 403
    # the audit log an organisation's admin reads holds what its organisation's keys did, not the instance admin's
    actions = [e["action"] for e in acme.get("/v1/audit/logs").json()]
    assert actions == ["project.create"] and len(admin.get("/v1/audit/logs").json()) > len(actions)


def test_a_key_is_read_again_after_its_ttl_and_unknown_or_revoked_keys_are_not_kept(orgs):
    now = [0.0]
    cache = keys.KeyCache(ttl=5, clock=lambda: now[0])
    store = orgs.app.state.store
    with store.session() as session:
        row, key = keys.create_key(session, "cached", "editor")
    assert cache.cached(key) is None  # never read: the caller reads the store
    with store.session() as session:
        grant = cache.read(session, key)
    assert grant == keys.KeyGrant(row.id, "editor", None, None) and cache.cached(key) == grant
    with store.session() as session:
        session.get(ApiKeyRow, row.id).revoked = True
    now[0] += 4.9
    assert cache.cached(key) == grant  # revoked within its ttl: still taken
    now[0] += 0.2
    assert cache.cached(key) is None
    with store.session() as session:
        assert cache.read(session, key) is None and cache.read(session, "agn_unknown") is None
    assert cache.known == {}


def test_a_key_for_a_project_and_an_organisation_at_once_is_refused(orgs):
    from agnitra.errors import UserError

    with orgs.app.state.store.session() as session, pytest.raises(UserError, match="not both"):
        keys.create_key(session, "both", "viewer", project="team", organisation="acme")

