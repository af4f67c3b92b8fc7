package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/phobos-project/phobos"
	"github.com/phobos-project/phobos/transport"
	"github.com/phobos-project/phobos/transport/pki"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newTLSCmd is `phobos tls ca create | cert create`, after `nomad tls` and
// `consul tls`: a cluster's CA and the certificates of its members.
func newTLSCmd() *cobra.Command {
	return group("tls", "make the cluster's CA and its members' certificates: tls ca create | cert create",
		group("ca", "the cluster's certificate authority", newTLSCACreateCmd()),
		group("cert", "certificates signed by the cluster's CA", newTLSCertCreateCmd()))
}

// tlsCommand runs `phobos tls ARGS...` writing to out (for tests).
func tlsCommand(args []string, out io.Writer) error {
	return runCommand(context.Background(), append([]string{"tls"}, args...), out, io.Discard)
}

func newTLSCACreateCmd() *cobra.Command {
	cmd, fs := newCommand("create", "make the cluster's CA: DIR/ca.pem (for every node and client) and DIR/ca-key.pem (keep it offline)", nil)
	dir := fs.String("dir", ".", "directory to write ca.pem and ca-key.pem to (made 0700 if missing)")
	name := fs.String("name", "phobos CA", "the CA's name (its certificate's common name)")
	days := fs.Int("days", int(pki.DefaultCAValidity/(24*time.Hour)), "days the CA is valid; every certificate it signs ends by then")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		out := cmd.OutOrStdout()
		if *days <= 0 {
			return usagef("--days %d: want a positive number of days", *days)
		}
		ca, err := pki.NewCA(*name, time.Duration(*days)*24*time.Hour)
		if err != nil {
			return err
		}
		certPath, keyPath := filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca-key.pem")
		if err := ca.WriteFiles(certPath, keyPath); err != nil {
			return fmt.Errorf("%w (a CA is made once per cluster; to start over, remove both files)", err)
		}
		fmt.Fprintf(out, "wrote %s: the CA certificate %q, valid until %s; give it to every node and client (--tls-ca)\n",
			certPath, *name, ca.Certificate().NotAfter.UTC().Format(time.DateOnly))
		fmt.Fprintf(out, "wrote %s: the CA key (mode 0600); keep it off the cluster's machines, it signs every certificate\n", keyPath)
		return nil
	}
	return cmd
}

// listFlag is a repeatable, comma-separated string flag.
type listFlag []string

func (l *listFlag) Type() string   { return "LIST" }
func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

func newTLSCertCreateCmd() *cobra.Command {
	cmd, fs := newCommand("create", "make a certificate and key signed by the CA, for a head, a raylet, a client or an admin (--role)", nil)
	role := fs.String("role", "", "what the holder may do: head, raylet, client or admin (required)")
	name := fs.String("name", "", "the holder's identity: a node's id, or the user a client acts for (default: the role)")
	var ips, dns listFlag
	fs.Var(&ips, "ip", "IP addresses in the certificate, comma-separated or repeated (heads and raylets default to 127.0.0.1 and ::1)")
	fs.Var(&dns, "dns", "DNS names in the certificate, comma-separated or repeated (heads and raylets default to localhost)")
	days := fs.Int("days", int(pki.DefaultCertValidity/(24*time.Hour)), "days the certificate is valid (by default, shortened to end with the CA if need be)")
	dir := fs.String("dir", ".", "directory to write NAME.pem and NAME-key.pem to")
	caCert := fs.String("ca-cert", "", "the CA certificate (default DIR/ca.pem)")
	caKey := fs.String("ca-key", "", "the CA key (default DIR/ca-key.pem)")
	force := fs.Bool("force", false, "replace existing files (to renew a running node's certificate: it reloads them)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		out := cmd.OutOrStdout()
		r, err := pki.ParseRole(*role)
		if err != nil {
			return usagef("--role: %v", err)
		}
		if *name == "" {
			*name = r.String()
		}
		if strings.ContainsAny(*name, `/\`) || strings.HasPrefix(*name, ".") {
			return usagef("--name %q: the files are named after it, so it cannot hold a slash or start with a dot", *name)
		}
		if *days <= 0 {
			return usagef("--days %d: want a positive number of days", *days)
		}
		req := pki.Request{Role: r, Name: *name, DNS: dns}
		fs.Visit(func(f *pflag.Flag) {
			if f.Name == "days" { // explicit: an error if it outlives the CA
				req.Validity = time.Duration(*days) * 24 * time.Hour
			}
		})
		for _, s := range ips {
			ip := net.ParseIP(s)
			if ip == nil {
				return usagef("--ip %q is not an IP address", s)
			}
			req.IPs = append(req.IPs, ip)
		}
		if *caCert == "" {
			*caCert = filepath.Join(*dir, "ca.pem")
		}
		if *caKey == "" {
			*caKey = filepath.Join(*dir, "ca-key.pem")
		}
		ca, err := pki.LoadCA(*caCert, *caKey)
		if err != nil {
			return fmt.Errorf("%w (make a CA with phobos tls ca create, or point --ca-cert and --ca-key at it)", err)
		}
		c, err := ca.Issue(req)
		if err != nil {
			return err
		}
		certPath, keyPath := filepath.Join(*dir, *name+".pem"), filepath.Join(*dir, *name+"-key.pem")
		write := c.WriteFiles
		if *force {
			write = c.ReplaceFiles
		}
		if err := write(certPath, keyPath); err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%w (pass --force to replace it)", err)
			}
			return err
		}
		var sans []string
		for _, ip := range c.Leaf.IPAddresses {
			sans = append(sans, ip.String())
		}
		sans = append(sans, c.Leaf.DNSNames...)
		fmt.Fprintf(out, "wrote %s: certificate %q, role %s, valid until %s", certPath, *name, r, c.Leaf.NotAfter.UTC().Format(time.DateOnly))
		if len(sans) > 0 {
			fmt.Fprintf(out, ", for %s", strings.Join(sans, ", "))
		}
		fmt.Fprintln(out, " (--tls-cert)")
		fmt.Fprintf(out, "wrote %s: its key (mode 0600; --tls-key)\n", keyPath)
		return nil
	}
	return cmd
}

// tlsFlags are the security flags of every command that listens or
// dials: mutual TLS by default, or plaintext with a token when asked.
type tlsFlags struct {
	ca, cert, key string
	insecure      bool
	tokenFile     string
}

// Environment variables that give the security flags' defaults, so that
// `source DIR/env` (which phobos up writes) sets up every later command.
const (
	envTLSCA     = "PHOBOS_TLS_CA"
	envTLSCert   = "PHOBOS_TLS_CERT"
	envTLSKey    = "PHOBOS_TLS_KEY"
	envTokenFile = "PHOBOS_TOKEN_FILE"
	// envInsecure=1 sets --insecure-plaintext (phobos up --insecure-plaintext
	// writes it to DIR/env with the token file).
	envInsecure = "PHOBOS_INSECURE_PLAINTEXT"
)

func (f *tlsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.ca, "tls-ca", os.Getenv(envTLSCA), "the cluster's CA certificate (phobos tls ca create writes ca.pem; env "+envTLSCA+")")
	fs.StringVar(&f.cert, "tls-cert", os.Getenv(envTLSCert), "this process's certificate (phobos tls cert create; env "+envTLSCert+")")
	fs.StringVar(&f.key, "tls-key", os.Getenv(envTLSKey), "its private key, mode 0600 (env "+envTLSKey+")")
	fs.BoolVar(&f.insecure, "insecure-plaintext", os.Getenv(envInsecure) == "1", "no TLS: plaintext connections, authenticated by --token-file only (every token holder may act as any node and user; env "+envInsecure+"=1)")
	fs.StringVar(&f.tokenFile, "token-file", os.Getenv(envTokenFile), "the cluster token, with --insecure-plaintext (mode 0600, at least 32 bytes; env "+envTokenFile+")")
}

// client connects to the cluster at connect with the flags' credentials,
// or, when connect is empty, starts an embedded cluster (plaintext only if
// --insecure-plaintext: for measuring what TLS costs).
func (f *tlsFlags) client(ctx context.Context, connect string, opts phobos.Options, local phobos.LocalConfig, log *slog.Logger) (*phobos.Client, error) {
	if connect == "" {
		local.Options, local.Logger, local.Insecure = opts, log, f.insecure
		return phobos.Local(ctx, local)
	}
	creds, err := f.credentials(log)
	if err != nil {
		return nil, err
	}
	return phobos.Connect(ctx, connect, creds, opts)
}

// credentials are the flags' credentials for a driver (phobos.Connect).
func (f *tlsFlags) credentials(log *slog.Logger) (phobos.Credentials, error) {
	var cfg transport.Config
	if err := f.apply(&cfg, transport.RoleClient, log); err != nil {
		return phobos.Credentials{}, err
	}
	return phobos.Credentials{TLS: cfg.TLS, Token: cfg.Token}, nil
}

// apply checks the flags and fills cfg's security fields: the TLS
// identity, or plaintext mode with the token and the role this process
// claims (role). It keeps cfg's other fields. A daemon calls warn once it
// runs.
func (f *tlsFlags) apply(cfg *transport.Config, role transport.Role, log *slog.Logger) error {
	cfg.SettingNames = transportFlags
	if f.insecure {
		var given []string
		for _, g := range []struct{ flag, v string }{{"--tls-ca", f.ca}, {"--tls-cert", f.cert}, {"--tls-key", f.key}} {
			if g.v != "" {
				given = append(given, g.flag)
			}
		}
		if len(given) > 0 {
			return usagef("--insecure-plaintext turns TLS off, but %s %s given; drop one or the other", strings.Join(given, ", "), plural(len(given), "is", "are"))
		}
		if f.tokenFile == "" {
			return usagef("--insecure-plaintext needs --token-file: plaintext connections are authenticated by the cluster token (make one with %s; chmod 600 token)", transport.MakeTokenCommand)
		}
		tok, err := transport.ReadTokenFile(f.tokenFile)
		if err != nil {
			return err
		}
		cfg.TLS, cfg.Insecure, cfg.Token, cfg.Role = nil, true, tok, role
		return nil
	}
	var missing []string
	for _, m := range []struct{ flag, v string }{{"--tls-ca", f.ca}, {"--tls-cert", f.cert}, {"--tls-key", f.key}} {
		if m.v == "" {
			missing = append(missing, m.flag)
		}
	}
	if len(missing) > 0 {
		return usagef("no %s: connections are mutual TLS, so every process needs the cluster's CA, its certificate and its key "+
			"(phobos tls ca create; phobos tls cert create --role R), or every process runs --insecure-plaintext --token-file F", strings.Join(missing, ", "))
	}
	if f.tokenFile != "" && f.tokenFile != os.Getenv(envTokenFile) {
		return usagef("--token-file is only used with --insecure-plaintext: under TLS the certificate is the credential; drop --token-file")
	}
	src, err := pki.LoadSource(pki.Files{CA: f.ca, Cert: f.cert, Key: f.key})
	if err != nil {
		return err
	}
	cfg.TLS, cfg.Insecure, cfg.Token = src, false, nil
	if left := time.Until(src.NotAfter()); left < pki.RenewBefore {
		log.Warn("this process's certificate expires soon; issue a new one (phobos tls cert create --force) and it reloads",
			"cert", f.cert, "not_after", src.NotAfter().UTC(), "left", left.Round(time.Minute))
	}
	return nil
}

// warn logs, in plaintext mode, what running without TLS means.
func (f *tlsFlags) warn(log *slog.Logger) {
	if f.insecure {
		log.Warn("running without TLS (--insecure-plaintext): connections are not encrypted, and every holder of the cluster token may act as any node, role and user")
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// reloadTLS keeps a daemon's certificate fresh until ctx ends: it reloads
// src on SIGHUP and when its files change (checked every interval),
// logging each outcome. A nil src (plaintext mode) is a no-op.
func reloadTLS(ctx context.Context, src *pki.Source, every time.Duration, log *slog.Logger) {
	if src == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			if err := src.Reload(); err != nil {
				log.Warn("SIGHUP: certificate not reloaded", "err", err)
				continue
			}
			id := src.Identity()
			log.Info("SIGHUP: certificate reloaded", "name", id.Name, "role", id.Role.String(), "serial", id.Serial, "not_after", id.NotAfter.UTC())
		}
	}()
	go src.Watch(ctx, every, log)
}
