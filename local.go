package phobos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/phobos-project/phobos/internal/ctxutil"
	"github.com/phobos-project/phobos/objectstore"
	"github.com/phobos-project/phobos/raftmeta"
	"github.com/phobos-project/phobos/runtime/head"
	"github.com/phobos-project/phobos/runtime/raylet"
	"github.com/phobos-project/phobos/runtime/web"
	"github.com/phobos-project/phobos/transport"
	"github.com/phobos-project/phobos/transport/pki"
)

// LocalConfig configures an embedded cluster.
type LocalConfig struct {
	// Raylets is the number of raylets; default 2.
	Raylets int
	// Slots per raylet; default the CPUs divided among the raylets (at least 1).
	Slots int
	// StoreSize is each raylet's object store capacity in bytes; default 512 MiB.
	StoreSize int64
	// StoreDir holds the store arenas; default /dev/shm (or the temp dir).
	StoreDir string
	// SpillDir is where full stores spill objects (each raylet in its own
	// subdirectory, removed at Close); default the temp dir.
	SpillDir string
	// Dir holds the head's Raft data; default a new temporary directory,
	// removed by Close.
	Dir string
	// Options are the client's job defaults.
	Options Options
	// Logger receives the cluster's logs; nil discards them.
	Logger *slog.Logger
	// Insecure runs the cluster without TLS (plaintext, a random token),
	// as `phobos head --insecure-plaintext` does; for measuring what TLS
	// costs. By default every connection is mutual TLS with certificates
	// from a CA made in memory for this cluster.
	Insecure bool
	// NoHTTP serves no web service. By default the head and every raylet
	// serve theirs (docs/http-api.md) on a free loopback port, HTTPS under
	// TLS, with a bearer token in Dir/http-token; Client.LocalWeb says
	// where.
	NoHTTP bool
	// NoPipeline stops the head from dispatching a subtask ahead of its
	// inputs to the raylet making them (head.Config.NoPipeline): every
	// dependent hop then goes through the head. For measuring what
	// pipelining saves.
	NoPipeline bool
}

// LocalWeb is where an embedded cluster's web services listen.
type LocalWeb struct {
	// Head is the base URL of the head's: the API, the dashboard (/ui/),
	// /metrics.
	Head string
	// Raylets are the raylets', in order.
	Raylets []string
	// TokenFile holds the bearer token; the dashboard takes it once as
	// Head+"/ui/?token=TOKEN".
	TokenFile string
}

// localValidity is how long an embedded cluster's certificates last.
const localValidity = 30 * 24 * time.Hour

type localCluster struct {
	head    *head.Server
	raylets []*raylet.Raylet
	dir     string
	ownDir  bool
	token   []byte    // plaintext clusters
	pki     *localPKI // TLS clusters: the in-memory CA
	web     LocalWeb
}

// Local starts a head and raylets inside this process, listening on
// loopback, and connects to them. Close stops them and removes their files.
func Local(ctx context.Context, cfg LocalConfig) (*Client, error) {
	if cfg.Raylets <= 0 {
		cfg.Raylets = 2
	}
	if cfg.Slots <= 0 {
		cfg.Slots = max(1, runtime.NumCPU()/cfg.Raylets)
	}
	if cfg.StoreSize <= 0 {
		cfg.StoreSize = 512 << 20
	}
	lc := &localCluster{dir: cfg.Dir}
	if lc.dir == "" {
		d, err := os.MkdirTemp("", "phobos-local-")
		if err != nil {
			return nil, fmt.Errorf("phobos: local cluster dir: %w", err)
		}
		lc.dir, lc.ownDir = d, true
	}
	var tok [32]byte
	rand.Read(tok[:])
	token := []byte(hex.EncodeToString(tok[:]))
	name := "local-" + hex.EncodeToString(tok[:3]) // unique per cluster, so several can share a process
	log := cfg.Logger
	if log == nil {
		log = cfg.Options.Logger
	}

	creds := Credentials{Token: token}
	var headTLS *pki.Source
	rayletTLS := make([]*pki.Source, cfg.Raylets)
	if !cfg.Insecure {
		p, err := newLocalPKI(name)
		if err != nil {
			lc.close()
			return nil, err
		}
		lc.pki = p
		if headTLS, err = p.source(pki.RoleHead, name+"-head"); err != nil {
			lc.close()
			return nil, err
		}
		for i := range rayletTLS {
			if rayletTLS[i], err = p.source(pki.RoleRaylet, fmt.Sprintf("%s-raylet-%d", name, i)); err != nil {
				lc.close()
				return nil, err
			}
		}
		if creds.TLS, err = p.source(pki.RoleClient, "local"); err != nil {
			lc.close()
			return nil, err
		}
		creds.Token = nil
	}
	httpAddr, tokenFile := "", ""
	if !cfg.NoHTTP {
		httpAddr, tokenFile = "127.0.0.1:0", filepath.Join(lc.dir, "http-token")
		os.Remove(tokenFile) // a Dir used before: a new token
		if _, err := web.WriteTokenFile(tokenFile); err != nil {
			lc.close()
			return nil, fmt.Errorf("phobos: local cluster: %w", err)
		}
		lc.web.TokenFile = tokenFile
	}
	rc := raftmeta.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	h, err := head.Start(head.Config{
		ID: name + "-head", Listen: "127.0.0.1:0", DataDir: filepath.Join(lc.dir, "head"),
		Token: token, Raft: rc, Logger: log, Transport: transport.Config{TLS: headTLS, Insecure: cfg.Insecure},
		HTTP: httpAddr, HTTPTokenFile: tokenFile, NoPipeline: cfg.NoPipeline,
	})
	if err != nil {
		lc.close()
		return nil, fmt.Errorf("phobos: start local head: %w", err)
	}
	lc.head, lc.token = h, token
	lc.web.Head = h.HTTPURL()
	for i := 0; i < cfg.Raylets; i++ {
		r, err := raylet.Start(ctx, raylet.Config{
			ID: fmt.Sprintf("%s-raylet-%d", name, i), Heads: []string{h.Addr()}, Token: token, Slots: cfg.Slots,
			Store:     objectstore.Config{Dir: cfg.StoreDir, Capacity: cfg.StoreSize, SpillDir: cfg.SpillDir},
			Logger:    log,
			Transport: transport.Config{TLS: rayletTLS[i], Insecure: cfg.Insecure},
			HTTP:      httpAddr, HTTPTokenFile: tokenFile,
		})
		if err != nil {
			lc.close()
			return nil, fmt.Errorf("phobos: start local raylet %d: %w", i, err)
		}
		lc.raylets = append(lc.raylets, r)
		if u := r.HTTPURL(); u != "" {
			lc.web.Raylets = append(lc.web.Raylets, u)
		}
	}
	if lc.web.Head != "" && log != nil {
		log.Info("embedded cluster's web services", "head", lc.web.Head, "raylets", lc.web.Raylets, "token_file", tokenFile)
	}
	c, err := Connect(ctx, h.Addr(), creds, cfg.Options)
	if err != nil {
		lc.close()
		return nil, err
	}
	c.local = lc
	if err := c.waitRaylets(ctx, cfg.Raylets); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// LocalWeb reports where the web services of the cluster Local started
// listen; ok is false for a client of another cluster, or one started
// with NoHTTP.
func (c *Client) LocalWeb() (w LocalWeb, ok bool) {
	if c.local == nil || c.local.web.Head == "" {
		return LocalWeb{}, false
	}
	w = c.local.web
	w.Raylets = slices.Clone(w.Raylets)
	return w, true
}

// waitRaylets waits until n raylets are alive.
func (c *Client) waitRaylets(ctx context.Context, n int) error {
	for {
		st, err := c.Status(ctx)
		if err != nil {
			return fmt.Errorf("phobos: wait for %d raylets: %w", n, err)
		}
		alive := 0
		for _, r := range st.Raylets {
			if r.State == RayletAlive {
				alive++
			}
		}
		if alive >= n {
			return nil
		}
		if err := ctxutil.Sleep(ctx, 5*time.Millisecond); err != nil {
			return fmt.Errorf("phobos: %d of %d raylets registered: %w", alive, n, err)
		}
	}
}

func (lc *localCluster) close() error {
	var errs []error
	for _, r := range lc.raylets {
		if err := r.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if lc.head != nil {
		if err := lc.head.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if lc.ownDir {
		if err := os.RemoveAll(lc.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
