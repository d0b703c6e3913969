package daemon

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"corpus/cmd/corpus/cli"
	"corpus/internal/version"
	"corpus/netns/proxy"
	"corpus/netns/proxy/proxyd"
)

func newProxyCmd(g *cli.Globals) *cobra.Command {
	var (
		cfg           = proxyd.Config{DrainTimeout: proxyd.DefaultDrainTimeout}
		certs         []string
		logs          logFlags
		releaseMounts bool
		reportFD      int
	)
	cmd := &cobra.Command{
		Use:   "proxy --dir DIR",
		Short: "Run a node's proxy ingress as a process of its own (the agent starts and configures it)",
		Long: `Run a node's proxy ingress as a process of its own. The agent starts one
in <state>/proxy when none answers there and sets its routes; it outlives
the agent, so agent restarts and upgrades leave ingress serving.

--takeover replaces the proxy serving DIR without dropping a connection:
the running process hands its listening sockets and routes over, then
lets its own connections finish (up to --drain-timeout) and exits.`,
		Example: `  corpus proxy --dir /var/lib/corpus/agent/proxy --http-addr :80
  corpus proxy --dir /var/lib/corpus/agent/proxy --http-addr :80 --takeover   # upgrade in place`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if reportFD > 2 {
				// Kept from CloseInheritedFiles, and from what this runs.
				syscall.CloseOnExec(reportFD)
				cfg.Report = os.NewFile(uintptr(reportFD), "report")
			}
			proxyd.CloseInheritedFiles()
			logger, err := logs.logger()
			if err != nil {
				return err
			}
			for _, pair := range certs {
				cert, key, ok := strings.Cut(pair, ":")
				if !ok {
					return fmt.Errorf("--cert %q: want CERT.pem:KEY.pem", pair)
				}
				cfg.Proxy.Certs = append(cfg.Proxy.Certs, proxy.CertFiles{CertFile: cert, KeyFile: key})
			}
			if cfg.Dir == "" {
				return fmt.Errorf("--dir is required")
			}
			cfg.Logger = logger.With("component", "proxy")
			if releaseMounts {
				if err := proxyd.ReleaseMounts(cfg.Dir); err != nil {
					cfg.Logger.Warn("letting go of the agent's volume mounts", "error", err)
				}
			}
			cfg.Version = version.Get().String()
			// READY=1 once serving, for a unit of its own (no watchdog:
			// nothing beats after).
			cfg.Ready = notifier(cmd.Context(), logger).Heart("proxy").Beat
			return proxyd.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "", "the proxy's folder: control and handover sockets, kept routes")
	f.StringVar(&cfg.Proxy.HTTPAddr, "http-addr", ":80", "HTTP listen address")
	f.StringVar(&cfg.Proxy.HTTPSAddr, "https-addr", "", "HTTPS listen address (off when empty)")
	f.StringSliceVar(&certs, "cert", nil, "HTTPS certificate CERT.pem:KEY.pem (repeatable)")
	f.BoolVar(&cfg.Takeover, "takeover", false, "take the listeners and routes of the proxy serving --dir over, dropping nothing")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long connections get to finish when this process stops or hands over")
	f.BoolVar(&releaseMounts, "release-mounts", false, "in a mount namespace of its own, unmount the agent's volumes (the agent starts it so)")
	f.MarkHidden("release-mounts")
	f.IntVar(&reportFD, "report-fd", 0, "file descriptor the start's outcome is written to (the agent gives one)")
	f.MarkHidden("report-fd")
	logs.add(f)
	return cmd
}
