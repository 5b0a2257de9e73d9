package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	systemd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v3"
	"golang.org/x/sync/errgroup"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/lease"
	"github.com/checkpointd/checkpointd/mcp"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/ui"
	"github.com/checkpointd/checkpointd/webhook"
	"github.com/checkpointd/checkpointd/writefail"
)

func serveCommand(from func(string) cli.ValueSourceChain, dataFlags, logFlags []cli.Flag, getenv func(string) string) *cli.Command {
	def := checkpointd.DefaultWorkflow()
	flags := []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:8080", Sources: from("CHECKPOINTD_LISTEN"), Usage: "address to serve the API on"},
		&cli.StringFlag{Name: "key-file", Sources: from("CHECKPOINTD_KEY_FILE"),
			Usage: "server key file (default <data-dir>/checkpointd.key, created on first start); CHECKPOINTD_KEY overrides it"},
		&cli.Int64Flag{Name: "max-document-bytes", Value: checkpointd.DefaultMaxDocumentBytes, Sources: from("CHECKPOINTD_MAX_DOCUMENT_BYTES"),
			Usage: "largest accepted checkpoint document"},
		&cli.StringFlag{Name: "roles", Value: joinNames(def.Roles), Sources: from("CHECKPOINTD_ROLES"), Usage: "configured session roles, comma-separated"},
		&cli.StringFlag{Name: "stages", Value: joinNames(def.Stages), Sources: from("CHECKPOINTD_STAGES"), Usage: "configured workflow stages, comma-separated"},
		&cli.StringSliceFlag{Name: "webhook-secret", Sources: from("CHECKPOINTD_WEBHOOK_SECRET"),
			Usage: "secret of the Gitea/Forgejo webhook (repeatable, or comma-separated, for rotation); without one every delivery is refused"},
		&cli.BoolFlag{Name: "webhook-allow-unsigned", Sources: from("CHECKPOINTD_WEBHOOK_ALLOW_UNSIGNED"),
			Usage: "accept unsigned deliveries when no secret is set (unsafe: anyone reaching the daemon can invalidate sessions)"},
		&cli.Int64Flag{Name: "webhook-max-body-bytes", Value: webhook.DefaultMaxBody, Sources: from("CHECKPOINTD_WEBHOOK_MAX_BODY_BYTES"),
			Usage: "largest accepted webhook delivery body (413 above, refused as soon as it passes)"},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: 30 * time.Second, Sources: from("CHECKPOINTD_SHUTDOWN_TIMEOUT"),
			Usage: "how long in-flight requests and background workers may take to finish on shutdown"},
		&cli.StringFlag{Name: "console-secure-cookie", Value: "auto", Sources: from("CHECKPOINTD_CONSOLE_SECURE_COOKIE"),
			Usage: "mark the console's session cookie Secure: auto (unless --listen is loopback), always or never"},
		&cli.StringSliceFlag{Name: "mcp-allowed-origin", Sources: from("CHECKPOINTD_MCP_ALLOWED_ORIGIN"),
			Usage: "browser origin (scheme://host[:port]) allowed to call /mcp, repeatable; requests with any other Origin are refused (a loopback page may call a loopback daemon)"},
		&cli.StringFlag{Name: "metrics-listen", Sources: from("CHECKPOINTD_METRICS_LISTEN"),
			Usage: "serve GET /metrics on this address instead of on --listen (empty: on --listen)"},
		&cli.DurationFlag{Name: "run-liveness", Value: checkpointd.DefaultRunLiveness, Sources: from("CHECKPOINTD_RUN_LIVENESS"),
			Usage: "a run not heard from for this long reads as unresponsive (reported, never acted on)"},
		&cli.IntFlag{Name: "errors-keep", Value: store.DefaultErrorsKeep, Sources: from("CHECKPOINTD_ERRORS_KEEP"),
			Usage: "durable errors kept per source (checkpoint_write, reconcile, webhook); older ones are trimmed"},
		&cli.IntFlag{Name: "database-max-conns", Value: store.DefaultMaxConns, Sources: from("CHECKPOINTD_DATABASE_MAX_CONNS"),
			Usage: "most PostgreSQL connections the pool holds (each replica takes this many, plus a few for listeners, of the server's max_connections)"},
		&cli.StringFlag{Name: "write-failure-journal", Sources: from("CHECKPOINTD_WRITE_FAILURE_JOURNAL"),
			Usage: "this replica's journal of failed checkpoint writes the store could not record (default <data-dir>/write-failures.journal); one per replica"},
		&cli.DurationFlag{Name: "drain-confirm-timeout", Value: writefail.DefaultConfirmTimeout, Sources: from("CHECKPOINTD_DRAIN_CONFIRM_TIMEOUT"),
			Usage: "how long a drain completion waits for every replica to confirm it keeps no unrecorded failed write"},
		&cli.IntFlag{Name: "watch-memory-mib", Value: api.DefaultWatchMemory >> 20, Sources: from("CHECKPOINTD_WATCH_MEMORY_MIB"),
			Usage: "MiB the change feed's queues may hold for all watch streams together; past it the stream holding most is dropped (memory_budget)"},
		&cli.IntFlag{Name: "watch-max-streams", Value: api.DefaultWatchStreams, Sources: from("CHECKPOINTD_WATCH_MAX_STREAMS"),
			Usage: "open watch streams this replica serves; past it a new one is 429 too_many_watchers"},
		&cli.IntFlag{Name: "watch-max-streams-per-token", Value: api.DefaultWatchStreamsPerToken, Sources: from("CHECKPOINTD_WATCH_MAX_STREAMS_PER_TOKEN"),
			Usage: "open watch streams one token may hold on this replica; past it a new one is 429 too_many_watchers"},
	}
	flags = append(flags, reconcileServeFlags(from)...)
	flags = append(flags, retentionServeFlags(from)...)
	flags = append(append(flags, dataFlags...), logFlags...)
	return &cli.Command{
		Name:  "serve",
		Usage: "run the daemon",
		Flags: flags,
		Action: func(ctx context.Context, c *cli.Command) error {
			return serve(ctx, c, getenv)
		},
	}
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += n
	}
	return s
}

func serve(ctx context.Context, c *cli.Command, getenv func(string) string) error {
	log, err := newLogger(c, c.Root().ErrWriter)
	if err != nil {
		return err
	}
	// A checkpoint write allocates ~100 KB that dies at once; a GC target
	// of 400 % buys ~10 % more writes/s for a few tens of MB of heap
	// (docs/performance.md). GOGC, when set, decides instead.
	if getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// Every line logged with a request's context carries its request_id.
	log = slog.New(api.LogHandler(log.Handler()))
	// Every flag is checked before anything is created: a refused start
	// leaves the data directory as it was.
	cfg, err := serveConfigFrom(c, getenv, log)
	if err != nil {
		return err
	}
	dataDir := c.String("data-dir")
	if err := ensureDir(dataDir); err != nil {
		return err
	}
	dbURL := databaseURL(c)
	if !store.IsPostgres(dbURL) {
		if err := ensureDir(filepath.Dir(dbURL)); err != nil {
			return err
		}
		unlock, err := lockFile(dbURL + ".lock")
		if err != nil {
			return err
		}
		defer unlock()
	}
	s, err := openStore(ctx, c, log)
	if err != nil {
		return fmt.Errorf("cannot open the store: %w", err)
	}
	// The store closes last, after the HTTP server and the workers stopped.
	defer s.Close()
	// One set of metrics for the whole daemon, observed from the start so
	// the restart's validity reset is counted too.
	m := metrics.New()
	b := thisBuild()
	m.SetBuildInfo(b.Version, b.Revision, cmp.Or(b.GoVersion, runtime.Version()))
	s.SetObserver(m)
	s.SetErrorsKeep(c.Int("errors-keep"))
	s.SetRunLiveness(c.Duration("run-liveness"))
	errs := errlog.New(s, log, m)
	schemaVersion, err := s.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("cannot migrate the store: %w", err)
	}
	keys, err := loadKeys(ctx, s, cfg.keySource, cfg.keys)
	if err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	s.SetKeys(keys)
	if err := bootstrapOperator(ctx, s, dataDir, log); err != nil {
		return err
	}
	// The failed writes this replica could not record before it stopped
	// are replayed now; the replica announces itself before it serves, so
	// every completion from here on asks it.
	journalPath := c.String("write-failure-journal")
	if journalPath == "" {
		journalPath = filepath.Join(dataDir, "write-failures.journal")
	}
	journal, err := writefail.Open(journalPath, s, log, 0)
	if err != nil {
		return fmt.Errorf("refusing to start: %w", err)
	}
	defer journal.Close()
	if err := journal.Announce(ctx, version()); err != nil {
		return fmt.Errorf("cannot announce this replica: %w", err)
	}
	wf, reconciler, retention, retentionEvery := cfg.workflow, cfg.reconciler, cfg.retention, cfg.retentionEvery
	reconciler.Store = s
	reconciler.Metrics, reconciler.Errors = m, errs
	// A completed drain prepared this restart: lift it. A running drain
	// is kept: it gates new sessions and runs across restarts.
	if d, err := s.LiftCompletedDrain(ctx); err != nil {
		return fmt.Errorf("cannot read the drain state: %w", err)
	} else if d != nil {
		log.Info("lifted the completed drain this restart was prepared by", slog.String("drain", d.ID))
	}
	// Webhooks sent while the daemon was down are lost: nothing observed
	// before this start counts until reconcile has asked the forge again.
	// This happens before serving, so no resume answer says otherwise.
	// With several replicas, when another one is serving the daemon was
	// not down and its evidence stands; replicas starting together after
	// an outage reset once (store.JoinServing).
	first, leaveServing, err := s.JoinServing(ctx, func(ctx context.Context) error {
		n, err := s.ResetValidity(ctx, "the daemon restarted; not reconciled since")
		if err == nil && n > 0 {
			log.Info("sessions unverified until reconciled", slog.Int("count", n))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("cannot reset validity: %w", err)
	}
	leaveServing = sync.OnceFunc(leaveServing)
	defer leaveServing()
	if !first {
		log.Info("another replica is serving; validity kept")
	}

	leases := lease.NewManager(s, log)
	verifier := &webhook.Verifier{AllowUnsigned: c.Bool("webhook-allow-unsigned"), MaxBody: c.Int64("webhook-max-body-bytes")}
	for _, sec := range c.StringSlice("webhook-secret") {
		if sec = strings.TrimSpace(sec); sec != "" {
			verifier.Secrets = append(verifier.Secrets, []byte(sec))
		}
	}
	switch {
	case len(verifier.Secrets) == 0 && verifier.AllowUnsigned:
		log.Warn("webhooks: accepting UNSIGNED deliveries (--webhook-allow-unsigned): anyone who reaches this address can change session validity")
	case len(verifier.Secrets) == 0:
		log.Warn("webhooks: no --webhook-secret set; every delivery is refused")
	}
	// Closed as the server shuts down: watch streams never go idle, and
	// Shutdown would wait for them until its timeout.
	watchStop := make(chan struct{})
	deps := api.Deps{
		Store: api.StoresOf(s), Leases: leases, Workflow: wf, DigestKey: keys.DigestKey(),
		Webhook:          &webhook.Handler{Verifier: verifier, Store: s, Log: log, Metrics: m, Errors: errs},
		MaxDocumentBytes: c.Int64("max-document-bytes"), Logger: log, Reconciler: reconciler,
		Verifier: reconciler, Metrics: m, Errors: errs,
		Mutations: &reconcile.Resolver{Forge: reconciler.Forge, Metrics: m},
		Evidence: checkpointd.EvidenceSources{Webhooks: len(verifier.Secrets) > 0 || verifier.AllowUnsigned,
			Forge: reconciler.Forge != nil},
		WatchStop: watchStop, WatchBacklog: watchBacklog(retention.EventAge),
		Failures: journal, DrainConfirmTimeout: c.Duration("drain-confirm-timeout"),
		WatchMemory: c.Int64("watch-memory-mib") << 20, WatchStreams: int(c.Int("watch-max-streams")),
		WatchStreamsPerToken: int(c.Int("watch-max-streams-per-token")),
	}
	// The drain gauges mirror the store at every scrape: another replica
	// may have started or ended the drain, and a restart keeps a running
	// one. A scrape the store cannot answer keeps the last values (the
	// failure is counted in checkpointd_store_errors_total).
	m.OnScrape(func(ctx context.Context) {
		if st, err := s.DrainStatus(ctx, store.DrainQuery{Limit: 1}); err == nil {
			m.SetDrain(st.Drain, st.Counts)
		}
	})
	// The fleet gauges are read from the database, cached for 10 s, so
	// every replica reports the same numbers and a scrape never scans.
	m.WatchFleet(s.FleetCounts, 0, nil)
	m.WatchTableRows(func(ctx context.Context) ([]metrics.TableRows, error) {
		rows, err := s.TableRows(ctx)
		out := make([]metrics.TableRows, len(rows))
		for i, r := range rows {
			out[i] = metrics.TableRows{Table: r.Table, Live: r.Live, Dead: r.Dead}
		}
		return out, err
	}, nil)
	var metricsSrv *http.Server
	var metricsLn net.Listener
	if addr := cfg.metricsListen; addr != "" {
		if metricsLn, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer metricsLn.Close()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			IdleTimeout: 120 * time.Second}
	} else {
		deps.MetricsHandler = m.Handler()
	}
	apiHandler := api.New(deps)
	handler := routes(apiHandler,
		mcp.Handler(mcp.HTTPDeps{API: apiHandler, Authenticate: s.Authenticate, Version: version(), Workflow: wf,
			AllowedOrigins: c.StringSlice("mcp-allowed-origin")}),
		ui.New(ui.Deps{API: apiHandler, Authenticate: s.Authenticate, Sessions: s, Stages: wf.Stages, ForgeURL: reconciler.ForgeURL, Logger: log,
			SecureCookies: cfg.secureCookie, OAuth: consoleOAuth(cfg.oauth, s)}))
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext:       api.ConnContext, // a watch stream bounds its socket's send buffer
	}
	srv.RegisterOnShutdown(func() { close(watchStop) })
	metricsAddr := ""
	if metricsLn != nil {
		metricsAddr = metricsLn.Addr().String()
	}
	log.Info("serving", slog.String("addr", ln.Addr().String()), slog.String("store", string(s.Dialect())),
		slog.Int64("schema_version", schemaVersion), slog.String("metrics_addr", metricsAddr))
	for _, w := range listenWarnings(cfg.listen, cfg.secureCookie) {
		log.Warn(w)
	}
	// Under systemd's Type=notify the unit is started once the listener is
	// bound (connections queue until Serve accepts them); elsewhere
	// NOTIFY_SOCKET is unset and this does nothing.
	notifySystemd(log, systemd.SdNotifyReady)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if metricsSrv != nil {
		g.Go(func() error {
			if err := metricsSrv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics listener: %w", err)
			}
			return nil
		})
	}
	// Background workers stop when gctx ends. With several replicas on one
	// PostgreSQL each kind runs in one replica at a time (an advisory lock),
	// and moves to another when that one stops.
	var workers errgroup.Group
	workers.Go(func() error { return s.RunExclusive(gctx, workLeaseExpiry, leases.Run) })
	workers.Go(func() error { return s.RunSettle(gctx) })
	workers.Go(func() error { return journal.Run(gctx) })
	workers.Go(func() error { return s.RunExclusive(gctx, workRunLiveness, s.RunUnresponsive) })
	workers.Go(func() error { return s.RunExclusive(gctx, workDrainReset, s.RunResetWrittenBefore) })
	workers.Go(func() error { return s.RunExclusive(gctx, workDrainVouch, s.RunDrainVouches) })
	// The first pass starts at once, in the background: readiness never
	// waits for the forge.
	workers.Go(func() error { return s.RunExclusive(gctx, workReconcile, reconciler.Run) })
	if p := cfg.statuses; p != nil {
		p.Store, p.Errors = s, errs
		workers.Go(func() error { return s.RunExclusive(gctx, workForgeStatus, p.Publish) })
	}
	if retentionEvery > 0 {
		workers.Go(func() error {
			return s.RunExclusive(gctx, workRetention, func(ctx context.Context) error {
				return s.RunRetention(ctx, retention, retentionEvery)
			})
		})
	}
	workersDone := make(chan struct{})
	go func() {
		_ = workers.Wait() // they log their own failures and return nil
		close(workersDone)
	}()
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down")
		notifySystemd(log, systemd.SdNotifyStopping)
		// No more webhooks are taken from here on: a replica starting now
		// must not count on this one having seen them.
		leaveServing()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Duration("shutdown-timeout"))
		defer cancel()
		// Stop admitting, then let in-flight requests finish: each commits or
		// rolls back as a whole, so nothing is left half-written.
		err := srv.Shutdown(sctx)
		if metricsSrv != nil {
			err = errors.Join(err, metricsSrv.Shutdown(sctx))
		}
		// The workers saw gctx end with everyone else; they get what is
		// left of the same timeout. One still running then is abandoned:
		// closing the store fails its transaction, which rolls back whole.
		select {
		case <-workersDone:
		case <-sctx.Done():
			log.Warn("background workers did not stop within the shutdown timeout")
		}
		// Nothing is noted any more: record what is kept and leave, or stay
		// registered so that completions wait for the next start.
		if lerr := journal.Leave(sctx); lerr != nil {
			log.Error("drain: this replica stays registered; every drain completion is refused until it starts again on its journal, or an operator overrides it",
				slog.String("replica", journal.ID()), slog.Any("err", lerr))
		}
		return err
	})
	err = g.Wait()
	log.Info("stopped")
	return err
}

// notifySystemd tells systemd the daemon's state (sd_notify), when it
// runs as a Type=notify unit. A failure to tell is logged, not fatal: the
// daemon serves either way, and systemd times the start out by itself.
func notifySystemd(log *slog.Logger, state string) {
	if _, err := systemd.SdNotify(false, state); err != nil {
		log.Warn("cannot notify systemd", slog.String("state", state), slog.Any("err", err))
	}
}

// watchBacklog is how far back a watch resume reaches: a day, or less when
// the event log keeps less (--retain-events): a resume from before what
// retention kept would miss what it pruned.
func watchBacklog(eventAge time.Duration) time.Duration {
	if eventAge > 0 && eventAge < api.DefaultWatchBacklog {
		return eventAge
	}
	return api.DefaultWatchBacklog
}

// The kinds of background work, each run by one replica at a time.
const (
	workLeaseExpiry = "lease-expiry"
	workReconcile   = "reconcile"
	workRetention   = "retention"
	workForgeStatus = "forge-status"
	// workRunLiveness records run.unresponsive events for the change feed.
	workRunLiveness = "run-liveness"
	// workDrainReset moves the sessions written before a running drain
	// into the drain's blocking index (store.ResetWrittenBefore).
	workDrainReset = "drain-reset"
	// workDrainVouch reads back the latest checkpoints of the sessions
	// ready for a running drain, and records a completed drain in its
	// sessions' logs (store.RunDrainVouches).
	workDrainVouch = "drain-vouch"
)

func workflowFrom(c *cli.Command) (checkpointd.Workflow, error) {
	roles, err := checkpointd.ParseNameList(c.String("roles"))
	if err != nil {
		return checkpointd.Workflow{}, fmt.Errorf("--roles: %w", err)
	}
	stages, err := checkpointd.ParseNameList(c.String("stages"))
	if err != nil {
		return checkpointd.Workflow{}, fmt.Errorf("--stages: %w", err)
	}
	wf := checkpointd.Workflow{Roles: roles, Stages: stages}
	if err := wf.Validate(); err != nil {
		return wf, err
	}
	return wf, nil
}

// bootstrapOperator gives the first start of an empty database an operator
// token, written to <data-dir>/operator.token (0600). The token is written
// before it is stored and the file renamed after, so a crash leaves no
// token, or a usable one that the next start recovers.
func bootstrapOperator(ctx context.Context, s *store.Store, dataDir string, log *slog.Logger) error {
	path := filepath.Join(dataDir, "operator.token")
	tmp := path + ".tmp"
	// A start that died between storing the token and renaming its file
	// left the only copy of a working secret in tmp: finish its job.
	if b, err := os.ReadFile(tmp); err == nil {
		if _, err := s.Authenticate(ctx, checkpointd.HashToken(strings.TrimSpace(string(b)))); err == nil {
			if err := os.Rename(tmp, path); err != nil {
				return fmt.Errorf("write operator token: %w", err)
			}
			log.Info("recovered the first operator token", slog.String("path", path))
			return nil
		}
	}
	secret := checkpointd.NewTokenSecret()
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("write operator token: %w", err)
	}
	defer os.Remove(tmp)
	created, err := s.EnsureOperatorToken(ctx, "bootstrap-operator", checkpointd.HashToken(secret))
	if err != nil {
		return fmt.Errorf("bootstrap operator token: %w", err)
	}
	if !created {
		return nil
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write operator token: %w", err)
	}
	log.Info("created the first operator token", slog.String("path", path))
	return nil
}

func ensureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	return nil
}

// lockFile takes an exclusive lock that the kernel releases when the process
// dies, so one SQLite file is served by one daemon and a crash never leaves
// a stale lock behind.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another checkpointd is serving this database (%s is locked); one daemon per SQLite file", path)
	}
	return func() { f.Close() }, nil
}
