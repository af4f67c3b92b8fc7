package web_test

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/phobos-project/phobos/dag"
	"github.com/phobos-project/phobos/runtime/metrics"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/runtime/web/webtest"
)

func TestHealthNeedsNoAuthentication(t *testing.T) {
	s, _ := headServer(t)
	c := client(t, nil)
	for _, p := range []string{"/healthz", "/api/v1/health"} {
		r := call(t, c, "GET", s.URL()+p, "")
		if r.status != 200 || !strings.Contains(string(r.body), `"ok"`) {
			t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
	}
}

// TestUnauthenticatedIs401JSON: every endpoint but the health check
// refuses a request without credentials, with a JSON error.
func TestUnauthenticatedIs401JSON(t *testing.T) {
	s, _ := headServer(t, func(c *web.Config) { c.Metrics = metrics.NewRegistry() })
	c := client(t, nil)
	for _, ep := range []struct{ method, path string }{
		{"GET", "/api/v1/whoami"}, {"GET", "/api/v1/cluster"}, {"GET", "/api/v1/jobs"}, {"POST", "/api/v1/jobs"},
		{"GET", "/api/v1/jobs/1"}, {"POST", "/api/v1/jobs/1/cancel"}, {"GET", "/api/v1/jobs/1/results/0"},
		{"GET", "/api/v1/jobs/1/timeline"}, {"GET", "/api/v1/jobs/1/logs?follow=1"}, {"GET", "/api/v1/events"},
		{"GET", "/metrics"}, {"GET", "/debug/pprof/"}, {"GET", "/ui/"}, {"GET", "/no/such/path"},
	} {
		r := call(t, c, ep.method, s.URL()+ep.path, "")
		wantError(t, r, http.StatusUnauthorized, dag.KindPermissionDenied, "authentication required")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", ep.method, ep.path)
		}
	}
	// A browser asking for a page gets a page that says how to sign in.
	r := call(t, c, "GET", s.URL()+"/ui/", "", "Accept", "text/html")
	if r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "?token=") {
		t.Fatalf("browser without credentials: %d %s", r.status, r.body)
	}
}

func TestBearerToken(t *testing.T) {
	s, _ := headServer(t)
	c := client(t, nil)
	r := call(t, c, "GET", s.URL()+"/api/v1/whoami", "", "Authorization", "Bearer "+testToken)
	if r.status != 200 || !strings.Contains(string(r.body), `"name":"http-token"`) || !strings.Contains(string(r.body), `"role":"admin"`) {
		t.Fatalf("whoami with the token: %d %s", r.status, r.body)
	}
	wantError(t, call(t, c, "GET", s.URL()+"/api/v1/whoami", "", "Authorization", "Bearer "+strings.Repeat("f", 64)),
		http.StatusUnauthorized, dag.KindPermissionDenied, "not this cluster's")
	wantError(t, call(t, c, "GET", s.URL()+"/api/v1/whoami", "", "Authorization", "Basic dXNlcjpwYXNz"),
		http.StatusUnauthorized, dag.KindPermissionDenied, "Bearer")
}

func TestClientCertificate(t *testing.T) {
	s, _ := headServer(t)
	p := certs(t)
	r := call(t, client(t, p.alice), "GET", s.URL()+"/api/v1/whoami", "")
	if r.status != 200 || !strings.Contains(string(r.body), `"name":"alice"`) || !strings.Contains(string(r.body), `"role":"client"`) {
		t.Fatalf("whoami with alice's certificate: %d %s", r.status, r.body)
	}
}

// TestCertificateOfAnotherCA: a certificate the cluster's CA did not sign
// is refused with the reason, even when it names a real user.
func TestCertificateOfAnotherCA(t *testing.T) {
	s, _ := headServer(t)
	r := call(t, client(t, certs(t).mallory), "GET", s.URL()+"/api/v1/jobs", "")
	wantError(t, r, http.StatusUnauthorized, dag.KindPermissionDenied, "another CA")
}

// TestProxyHeadersNeedAHead: a client cannot name another caller.
func TestProxyHeadersNeedAHead(t *testing.T) {
	s, _ := headServer(t)
	r := call(t, client(t, certs(t).alice), "GET", s.URL()+"/api/v1/whoami", "",
		web.HeaderProxied, "h9", web.HeaderCaller, "bob", web.HeaderCallerRole, "admin")
	if !strings.Contains(string(r.body), `"name":"alice"`) {
		t.Fatalf("a client naming another caller was believed: %s", r.body)
	}
	r = call(t, client(t, nil), "GET", s.URL()+"/api/v1/whoami", "", "Authorization", "Bearer "+testToken,
		web.HeaderProxied, "h9", web.HeaderCaller, "bob", web.HeaderCallerRole, "client")
	if !strings.Contains(string(r.body), `"name":"http-token"`) {
		t.Fatalf("a token holder named another caller over TLS and was believed: %s", r.body)
	}
}

// TestDashboardTokenBecomesCookie: ?token= is exchanged for an HttpOnly,
// SameSite=Strict, Secure cookie and dropped from the URL; the cookie then
// authenticates, but not a change from another origin.
func TestDashboardTokenBecomesCookie(t *testing.T) {
	s, h := headServer(t)
	c := client(t, nil)
	r := call(t, c, "GET", s.URL()+"/ui/?token="+testToken+"&x=1", "")
	if r.status != http.StatusSeeOther {
		t.Fatalf("GET /ui/?token=: %d %s", r.status, r.body)
	}
	if loc := r.header.Get("Location"); loc != "/ui/?x=1" {
		t.Fatalf("redirected to %q, want /ui/?x=1 (the token dropped)", loc)
	}
	resp := &http.Response{Header: r.header}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == web.SessionCookie {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || !cookie.Secure || cookie.SameSite != http.SameSiteStrictMode || strings.Contains(cookie.Value, testToken) {
		t.Fatalf("session cookie %+v: want HttpOnly, Secure, SameSite=Strict, not the token itself", cookie)
	}
	ck := cookie.Name + "=" + cookie.Value
	if r := call(t, c, "GET", s.URL()+"/ui/", "", "Cookie", ck); r.status != 200 || !strings.Contains(string(r.body), "<title>phobos</title>") {
		t.Fatalf("GET /ui/ with the cookie: %d", r.status)
	}
	if r := call(t, c, "GET", s.URL()+"/ui/", "", "Cookie", ck); r.header.Get("Content-Security-Policy") == "" {
		t.Fatal("the dashboard is served without a Content-Security-Policy")
	}
	wantError(t, call(t, c, "GET", s.URL()+"/ui/?token=nope", ""), http.StatusUnauthorized, dag.KindPermissionDenied, "not this cluster's")

	// A change with the cookie must come from the dashboard's origin.
	id := h.AddJob("http-token", "j", 10)
	path := s.URL() + "/api/v1/jobs/" + itoa(id) + "/cancel"
	wantError(t, call(t, c, "POST", path, "", "Cookie", ck), http.StatusForbidden, dag.KindPermissionDenied, "Origin")
	wantError(t, call(t, c, "POST", path, "", "Cookie", ck, "Origin", "https://127.0.0.1:1"), http.StatusForbidden, dag.KindPermissionDenied, "Origin")
	u, _ := url.Parse(s.URL())
	if r := call(t, c, "POST", path, "", "Cookie", ck, "Origin", "https://"+u.Host); r.status != 200 {
		t.Fatalf("cancel from the dashboard's origin: %d %s", r.status, r.body)
	}
	// A cookie from another token does not authenticate.
	wantError(t, call(t, c, "GET", s.URL()+"/api/v1/jobs", "", "Cookie", web.SessionCookie+"=abc"), http.StatusUnauthorized, dag.KindPermissionDenied, "session")
}

func TestConfigRefusals(t *testing.T) {
	h := webtest.NewHead()
	p := certs(t)
	for _, c := range []struct {
		name string
		cfg  web.Config
		want string
	}{
		{"neither", web.Config{Plaintext: true, Token: []byte(testToken)}, "exactly one"},
		{"no TLS", web.Config{Head: h, Token: []byte(testToken)}, "no TLS identity"},
		{"both", web.Config{Head: h, TLS: p.ca.Source(p.head), Plaintext: true, Token: []byte(testToken)}, "choose one"},
		{"no way in", web.Config{Head: h, Plaintext: true}, "let no one in"},
		{"short token", web.Config{Head: h, Plaintext: true, Token: []byte("short")}, "shorter than 32"},
		{"token principal", web.Config{Head: h, Plaintext: true, Token: []byte(testToken), TokenPrincipal: web.Principal{Name: "x"}}, "needs a name and a role"},
	} {
		if _, err := web.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "http-token")
	tok, err := web.WriteTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || len(tok) != 64 {
		t.Fatalf("token file: mode %v, %d bytes (%v)", fi.Mode(), len(tok), err)
	}
	if _, err := web.WriteTokenFile(path); err == nil {
		t.Fatal("WriteTokenFile replaced an existing token file")
	}
	s := start(t, web.Config{Head: webtest.NewHead(), Plaintext: true, TokenFile: path})
	if r := call(t, http.DefaultClient, "GET", s.URL()+"/api/v1/whoami", "", "Authorization", "Bearer "+string(tok)); r.status != 200 {
		t.Fatalf("whoami with the file's token: %d %s", r.status, r.body)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := web.New(web.Config{Head: webtest.NewHead(), Plaintext: true, TokenFile: path}); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a token file others may read: %v", err)
	}
}

// TestRolesOnEndpoints: a raylet's certificate sees the cluster but not
// jobs; pprof is for admins and heads.
func TestRolesOnEndpoints(t *testing.T) {
	s, _ := headServer(t)
	p := certs(t)
	ray := client(t, p.raylet)
	if r := call(t, ray, "GET", s.URL()+"/api/v1/cluster", ""); r.status != 200 {
		t.Fatalf("a raylet reading the cluster: %d %s", r.status, r.body)
	}
	wantError(t, call(t, ray, "GET", s.URL()+"/api/v1/jobs", ""), http.StatusForbidden, dag.KindPermissionDenied, "role raylet", "client or admin")
	// Every call on one job checks the role before it reads the job's
	// number: a raylet learns it may not, whatever the path says.
	for _, ep := range []struct{ method, path, what string }{
		{"GET", "", "read jobs"}, {"POST", "/cancel", "cancel jobs"}, {"POST", "/release", "release jobs' results"},
		{"GET", "/results", "read results"}, {"GET", "/results/0", "read results"}, {"GET", "/timeline", "read timelines"},
	} {
		wantError(t, call(t, ray, ep.method, s.URL()+"/api/v1/jobs/abc"+ep.path, ""), http.StatusForbidden, dag.KindPermissionDenied, "role raylet", ep.what)
	}
	wantError(t, call(t, client(t, p.alice), "GET", s.URL()+"/debug/pprof/", ""), http.StatusForbidden, dag.KindPermissionDenied, "profiles")
	if r := call(t, client(t, p.admin), "GET", s.URL()+"/debug/pprof/", ""); r.status != 200 || !strings.Contains(string(r.body), "goroutine") {
		t.Fatalf("pprof index for an admin: %d", r.status)
	}
	if r := call(t, client(t, nil), "GET", s.URL()+"/debug/pprof/cmdline", "", "Authorization", "Bearer "+testToken); r.status != 200 {
		t.Fatalf("pprof cmdline with the (admin) token: %d %s", r.status, r.body)
	}
}
