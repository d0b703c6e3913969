package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// routeTLSFlags are an http route's HTTPS settings.
type routeTLSFlags struct{ https, redirect, hsts bool }

func (t *routeTLSFlags) add(f *pflag.FlagSet) {
	f.BoolVar(&t.https, "https", false, "serve the domain over HTTPS with a certificate ordered by ACME (corpus ingress acme set)")
	f.BoolVar(&t.redirect, "redirect", false, "redirect plain HTTP to HTTPS once the certificate serves (needs --https)")
	f.BoolVar(&t.hsts, "hsts", false, "send Strict-Transport-Security on HTTPS (needs --https)")
}

// certSummary is the CERTIFICATE column of ingress list.
func certSummary(v *corpusv1.RouteView) string {
	if !v.Route.GetHttps() {
		return "-"
	}
	c := v.Certificate
	if c == nil {
		return "awaiting order"
	}
	var parts []string
	switch {
	case c.Challenge != "":
		parts = append(parts, "ordering ("+c.Challenge+")")
	case c.NotAfter != nil && c.State == "valid":
		parts = append(parts, "valid until "+c.NotAfter.AsTime().UTC().Format(time.DateOnly))
	default:
		parts = append(parts, c.State)
	}
	if c.State == "failed" {
		if c.NotAfter != nil && time.Now().Before(c.NotAfter.AsTime()) {
			parts = append(parts, "previous serves until "+c.NotAfter.AsTime().UTC().Format(time.DateOnly))
		}
		parts = append(parts, fmt.Sprintf("%q", c.LastError))
		if c.NextAttemptAt != nil {
			parts = append(parts, "retry "+c.NextAttemptAt.AsTime().Local().Format(time.DateTime))
		}
	}
	if c.OcspStapled {
		parts = append(parts, "ocsp")
	}
	return strings.Join(parts, ", ")
}

func newIngressTLSCmd(g *Globals) *cobra.Command {
	var t routeTLSFlags
	cmd := &cobra.Command{
		Use:   "tls DOMAIN [--https[=false]] [--redirect] [--hsts]",
		Short: "Set how an http route serves HTTPS",
		Example: `  corpus ingress tls www.example.com --https --redirect --hsts
  corpus ingress tls www.example.com --https=false`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.SetRouteTlsResponse], error) {
				return c.Ingress.SetRouteTls(ctx, connect.NewRequest(&corpusv1.SetRouteTlsRequest{Domain: args[0], Https: t.https, RedirectHttps: t.redirect, Hsts: t.hsts}))
			}, func(msg *corpusv1.SetRouteTlsResponse) error {
				r := msg.Route
				state := "unchanged"
				if msg.Changed {
					state = "set"
				}
				fmt.Fprintf(g.stdout, "%s: https=%t redirect=%t hsts=%t (%s)\n", r.Domain, r.Https, r.RedirectHttps, r.Hsts, state)
				return nil
			})
		},
	}
	t.add(cmd.Flags())
	return cmd
}

func newIngressRenewCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "renew DOMAIN",
		Short: "Order an https domain's certificate again now (the current one serves until the new one is issued)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.RenewDomainCertificateResponse], error) {
				return c.Ingress.RenewCertificate(ctx, connect.NewRequest(&corpusv1.RenewDomainCertificateRequest{Domain: args[0]}))
			}, func(msg *corpusv1.RenewDomainCertificateResponse) error {
				fmt.Fprintf(g.stdout, "certificate of %s will be ordered now; see corpus ingress list\n", msg.Certificate.GetDomain())
				return nil
			})
		},
	}
}

func newIngressACMECmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "acme", Short: "Configure the ACME CA that https routes' certificates are ordered from"}
	var email, caFile string
	var challenges []string
	set := &cobra.Command{
		Use:   "set --directory URL [--email ADDR] [--ca FILE] [--challenge http-01,tls-alpn-01]",
		Short: "Set the ACME directory (Let's Encrypt's or a private CA's) and account contact",
		Example: `  corpus ingress acme set --directory https://acme-v02.api.letsencrypt.org/directory --email ops@example.com
  corpus ingress acme set --directory https://ca.internal:14000/dir --ca ca.pem --challenge tls-alpn-01`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, _ := cmd.Flags().GetString("directory")
			if dir == "" {
				return fmt.Errorf("--directory: give the CA's ACME directory URL")
			}
			req := &corpusv1.SetAcmeRequest{DirectoryUrl: dir, Email: email, Challenges: challenges}
			if caFile != "" {
				b, err := os.ReadFile(caFile)
				if err != nil {
					return fmt.Errorf("--ca: %w", err)
				}
				req.CaPem = string(b)
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.SetAcmeResponse], error) {
				return c.Ingress.SetAcme(ctx, connect.NewRequest(req))
			}, func(msg *corpusv1.SetAcmeResponse) error {
				verb := "unchanged"
				if msg.Changed {
					verb = "set"
				}
				fmt.Fprintf(g.stdout, "acme directory %s (%s); challenges %s\n", msg.Acme.GetDirectoryUrl(), verb, strings.Join(msg.Acme.GetChallenges(), ", "))
				return nil
			})
		},
	}
	set.Flags().String("directory", "", "the CA's ACME directory URL")
	set.Flags().StringVar(&email, "email", "", "the account's contact address")
	set.Flags().StringVar(&caFile, "ca", "", "PEM roots to trust for the directory's HTTPS (a private CA)")
	set.Flags().StringSliceVar(&challenges, "challenge", nil, "challenge types in order of preference (default http-01,tls-alpn-01; tls-alpn-01 alone where port 80 is not reachable)")
	show := &cobra.Command{
		Use:   "show",
		Short: "Show the ACME configuration",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetAcmeResponse], error) {
				return c.Ingress.GetAcme(ctx, connect.NewRequest(&corpusv1.GetAcmeRequest{}))
			}, func(msg *corpusv1.GetAcmeResponse) error {
				a := msg.Acme
				if a == nil {
					fmt.Fprintln(g.stdout, "no ACME directory is set: https routes get no certificate (corpus ingress acme set)")
					return nil
				}
				fmt.Fprintf(g.stdout, "directory:   %s\nemail:       %s\nprivate CA:  %t\nchallenges:  %s\naccount:     %s\n",
					a.DirectoryUrl, dash(a.Email), a.HasCa, strings.Join(a.Challenges, ", "), dash(a.AccountUrl))
				return nil
			})
		},
	}
	unset := &cobra.Command{
		Use:   "unset",
		Short: "Remove the ACME configuration (certificates keep serving until they expire)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.SetAcmeResponse], error) {
				return c.Ingress.SetAcme(ctx, connect.NewRequest(&corpusv1.SetAcmeRequest{}))
			}, func(msg *corpusv1.SetAcmeResponse) error {
				fmt.Fprintln(g.stdout, "acme directory removed")
				return nil
			})
		},
	}
	cmd.AddCommand(set, show, unset)
	return cmd
}
