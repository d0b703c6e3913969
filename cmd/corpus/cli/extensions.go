package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

func newExtensionCmd(g *Globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "extension",
		Short: "Manage admission extensions: HTTPS endpoints that check or change writes before they are accepted",
		Long: `Extensions are HTTPS endpoints the coordinators call before they accept a
write of the kinds each is for (--on): guest.create, guest.update (the
guest's name and spec as they would be), project.create, service.create,
image.deploy (corpus deploy --image, or of the serving release's image
again), and deploy (a git push, before its pipeline).

  mutate     may change the object; called one after another in order
             (--after/--before, then the higher --priority, then the
             name), each seeing the previous one's result
  validate   may refuse it; called in parallel on the final object
  lint       sees a push (commit, changed files, corpus.yaml, Procfile)
             and may refuse it with lines shown in git push's output

A call is a POST of {"apiVersion": "corpus.dev/v1", "kind": ..., "user":
..., "object": ..., "image": ...} (the object is the API's own JSON of the
request; image, when the write runs an OCI image, holds its reference,
registry, repository and, where resolved, digest: a reference by digest,
or a release's recorded one);
the answer is {"allowed": true|false, "message": ..., "object": ...
(mutate), "lines": [...] (lint)}. Calls are made over TLS presenting the
replica's certificate of the cluster CA (mutual TLS), and with --secret-file
are signed: the Corpus-Signature header holds t=UNIX,v1=HEX, HEX the
HMAC-SHA256 of "UNIX." and the body. A call that fails (no answer within
--timeout, an error status, garbage, over 1 MiB, or five failures in a row
have opened its circuit for 30 s) refuses the write with
--failure-policy fail, and is audited and passed over with ignore.`,
	}
	var (
		url, caFile, kind, policy, secretFile string
		on, after, before                     []string
		priority                              int32
		timeout                               time.Duration
		replace                               bool
	)
	add := &cobra.Command{
		Use:   "add NAME --url https://... --on EVENTS --kind mutate|validate|lint",
		Short: "Add an extension (or replace one with --replace)",
		Example: `  corpus extension add memory-default --url https://hooks.internal/memory --ca hooks-ca.pem \
      --on guest.create,project.create --kind mutate --priority 10
  corpus extension add prod-labels --url https://hooks.internal/labels --ca hooks-ca.pem \
      --on guest.create --kind validate --secret-file hooks.secret
  corpus extension add no-secrets --url https://hooks.internal/lint --on deploy --kind lint --timeout 5s`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e := &corpusv1.Extension{Name: args[0], Url: url, Kind: kind, Priority: priority,
				After: after, Before: before, On: on, FailurePolicy: policy,
				TimeoutMs: timeout.Milliseconds()}
			if caFile != "" {
				b, err := os.ReadFile(caFile)
				if err != nil {
					return fmt.Errorf("--ca: %w", err)
				}
				e.CaPem = string(b)
			}
			var secret string
			if secretFile != "" {
				b, err := readSecret(cmd.InOrStdin(), secretFile)
				if err != nil {
					return fmt.Errorf("--secret-file: %w", err)
				}
				secret = b
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.AddExtensionResponse], error) {
				return c.Extensions.AddExtension(ctx, connect.NewRequest(&corpusv1.AddExtensionRequest{Extension: e, Secret: secret, Replace: replace}))
			}, func(msg *corpusv1.AddExtensionResponse) error {
				v := msg.Extension
				fmt.Fprintf(g.stdout, "extension %s added: %s, called %s for %s (order %d)\n", v.Extension.Name, v.Extension.Kind,
					callWay(v), strings.Join(v.Extension.On, ", "), v.Order)
				return nil
			})
		},
	}
	f := add.Flags()
	f.StringVar(&url, "url", "", "where it is called (https://)")
	f.StringVar(&caFile, "ca", "", "PEM file of the CA that signed its certificate (default: the system's roots)")
	f.StringSliceVar(&on, "on", nil, "writes it is called for (comma-separated or repeated): "+strings.Join(corpusv1.ExtensionEvents, ","))
	f.StringVar(&kind, "kind", "", "mutate, validate or lint")
	f.Int32Var(&priority, "priority", 0, "among extensions after/before leave free, the higher runs first")
	f.StringSliceVar(&after, "after", nil, "extensions it runs after (comma-separated or repeated)")
	f.StringSliceVar(&before, "before", nil, "extensions it runs before (comma-separated or repeated)")
	f.DurationVar(&timeout, "timeout", corpusv1.DefaultExtensionTimeout, "how long a call may take (at most 30s)")
	f.StringVar(&policy, "failure-policy", corpusv1.FailurePolicyFail, "when a call fails: fail (refuse the write) or ignore (audit it and go on)")
	f.StringVar(&secretFile, "secret-file", "", "file holding the shared secret that signs each call (16 bytes or more; - reads stdin); it is stored sealed")
	f.BoolVar(&replace, "replace", false, "replace an extension of that name")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the extensions in the order they are called",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ListExtensionsResponse], error) {
				return c.Extensions.ListExtensions(ctx, connect.NewRequest(&corpusv1.ListExtensionsRequest{}))
			}, func(msg *corpusv1.ListExtensionsResponse) error {
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tKIND\tORDER\tON\tPRIORITY\tAFTER\tBEFORE\tTIMEOUT\tON FAILURE\tSTATE\tURL")
				for _, v := range msg.Extensions {
					e := v.Extension
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Name, e.Kind, v.Order, strings.Join(e.On, ","), e.Priority,
						dash(strings.Join(e.After, ",")), dash(strings.Join(e.Before, ",")), time.Duration(e.TimeoutMs)*time.Millisecond,
						e.FailurePolicy, enabledText(e), e.Url)
				}
				return w.Flush()
			})
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show an extension",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.GetExtensionResponse], error) {
				return c.Extensions.GetExtension(ctx, connect.NewRequest(&corpusv1.GetExtensionRequest{Name: args[0]}))
			}, func(msg *corpusv1.GetExtensionResponse) error {
				v := msg.Extension
				e := v.Extension
				w := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				for _, kv := range [][2]string{
					{"name", e.Name}, {"kind", e.Kind}, {"on", strings.Join(e.On, ", ")}, {"url", e.Url},
					{"order", fmt.Sprintf("%d among %s extensions", v.Order, e.Kind)}, {"priority", fmt.Sprint(e.Priority)},
					{"after", dash(strings.Join(e.After, ", "))}, {"before", dash(strings.Join(e.Before, ", "))},
					{"timeout", (time.Duration(e.TimeoutMs) * time.Millisecond).String()}, {"on failure", e.FailurePolicy},
					{"calls", callWay(v)}, {"ca", caSummary(e.CaPem)}, {"state", enabledText(e)},
				} {
					fmt.Fprintf(w, "%s:\t%s\n", kv[0], kv[1])
				}
				return w.Flush()
			})
		},
	}
	setDisabled := func(use, short string, disabled bool) *cobra.Command {
		return &cobra.Command{
			Use: use + " NAME", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.SetExtensionDisabledResponse], error) {
					return c.Extensions.SetExtensionDisabled(ctx, connect.NewRequest(&corpusv1.SetExtensionDisabledRequest{Name: args[0], Disabled: disabled}))
				}, func(*corpusv1.SetExtensionDisabledResponse) error {
					fmt.Fprintf(g.stdout, "extension %s %sd\n", args[0], use)
					return nil
				})
			},
		}
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete an extension",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.DeleteExtensionResponse], error) {
				return c.Extensions.DeleteExtension(ctx, connect.NewRequest(&corpusv1.DeleteExtensionRequest{Name: args[0]}))
			}, func(*corpusv1.DeleteExtensionResponse) error {
				fmt.Fprintf(g.stdout, "extension %s deleted\n", args[0])
				return nil
			})
		},
	}
	cmd.AddCommand(add, list, show,
		setDisabled("disable", "Stop calling an extension (it stays configured)", true),
		setDisabled("enable", "Call a disabled extension again", false), del)
	return cmd
}

func callWay(v *corpusv1.ExtensionView) string {
	if v.Signed {
		return "over mutual TLS, signed"
	}
	return "over mutual TLS"
}

func caSummary(pemText string) string {
	if pemText == "" {
		return "the system's roots"
	}
	return fmt.Sprintf("%d certificate(s) given", strings.Count(pemText, "BEGIN CERTIFICATE"))
}

// readSecret reads a secret from a file ("-": stdin), trimmed.
func readSecret(stdin io.Reader, path string) (string, error) {
	if path != "-" {
		b, err := os.ReadFile(path)
		return strings.TrimSpace(string(b)), err
	}
	b, err := readAllLimited(stdin, 4096)
	return strings.TrimSpace(string(b)), err
}

func enabledText(e *corpusv1.Extension) string {
	if e.Disabled {
		return "disabled"
	}
	return "enabled"
}

// printAdmission prints who set what in an object, when extensions did,
// as lines of a "Key:\tvalue" table.
func printAdmission(w io.Writer, indent string, changes []*corpusv1.AdmissionChange) {
	for _, c := range changes {
		v := c.Value
		if v == "" {
			v = "(removed)"
		}
		fmt.Fprintf(w, "%sSet by %s:\t%s = %s\n", indent, c.Extension, c.Field, v)
	}
}
