package cli

import (
	"context"
	"crypto/ecdh"
	"crypto/hpke"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"

	"corpus/client"
	corpusv1 "corpus/proto/corpus/v1"
)

// Topology files: `project export` writes a project's shape as YAML (the
// API's ProjectTopology, field names as in the API's JSON), `project
// import` reads it. Values (config, external services' secrets) are
// only ever written encrypted, to a key the importer made with `project
// keygen` (HPKE, RFC 9180: X25519, HKDF-SHA256, AES-256-GCM); the
// importer's private key never leaves their machine.

const (
	keyPrefix  = "corpus-topology-key-v1:"
	pubPrefix  = "corpus-topology-pub-v1:"
	sealedInfo = "corpus project topology v1"
)

var topologyKEM = hpke.DHKEM(ecdh.X25519())

// topologyValues are a topology's values, as sealed.
type topologyValues struct {
	Envs     map[string]map[string]string `json:"envs,omitempty"`
	Services map[string]map[string]string `json:"services,omitempty"`
}

func newProjectKeygenCmd(g *Globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Make a key to receive a project's values with (prints the public key to give the exporter)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out: give the file the private key goes to")
			}
			k, err := topologyKEM.GenerateKey()
			if err != nil {
				return err
			}
			priv, err := k.Bytes()
			if err != nil {
				return err
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			if _, err := fmt.Fprintln(f, keyPrefix+base64.StdEncoding.EncodeToString(priv)); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			pub := pubPrefix + base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())
			if g.json {
				return g.PrintJSONValue(map[string]string{"public_key": pub, "key_file": out})
			}
			fmt.Fprintln(g.stdout, pub)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file the private key is written to (created, mode 0600)")
	return cmd
}

func newProjectExportCmd(g *Globals) *cobra.Command {
	var env, recipient, out string
	var withSecrets bool
	cmd := &cobra.Command{
		Use:   "export NAME [--env ENV] [--with-secrets --recipient PUBKEY] [-o FILE]",
		Short: "Write a project's topology (environments, domains, linked services, config keys, volume sizes) as YAML",
		Example: `  corpus project export site > site.yaml
  corpus project export site --with-secrets --recipient corpus-topology-pub-v1:... -o site.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var pub hpke.PublicKey
			if withSecrets {
				if recipient == "" {
					return errors.New("--with-secrets writes values only encrypted: give --recipient, the public key `corpus project keygen` printed for the importer")
				}
				b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(recipient), pubPrefix))
				if err != nil || !strings.HasPrefix(strings.TrimSpace(recipient), pubPrefix) {
					return errors.New("--recipient: not a public key of `corpus project keygen`")
				}
				if pub, err = topologyKEM.NewPublicKey(b); err != nil {
					return fmt.Errorf("--recipient: %w", err)
				}
			}
			c, err := g.Clients()
			if err != nil {
				return err
			}
			res, err := c.Projects.ExportProject(cmd.Context(), connect.NewRequest(&corpusv1.ExportProjectRequest{Name: args[0], Env: env, WithSecrets: withSecrets}))
			if err != nil {
				return err
			}
			top := res.Msg.Topology
			if withSecrets {
				if err := sealTopology(top, pub); err != nil {
					return err
				}
			}
			doc, err := topologyYAML(top)
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = g.stdout.Write(doc)
				return err
			}
			return os.WriteFile(out, doc, 0o600)
		},
	}
	f := cmd.Flags()
	f.StringVar(&env, "env", "", "export one environment")
	f.BoolVar(&withSecrets, "with-secrets", false, "include config and external services' secret values, encrypted to --recipient")
	f.StringVar(&recipient, "recipient", "", "the importer's public key (corpus project keygen)")
	f.StringVarP(&out, "output", "o", "", "file to write (default stdout)")
	return cmd
}

func newProjectImportCmd(g *Globals) *cobra.Command {
	var as, env, fromEnv, keyFile string
	var withoutDomains, dryRun bool
	cmd := &cobra.Command{
		Use:   "import FILE [--as NAME] [--env ENV [--from-env ENV]] [--without-domains] [--key FILE] [--dry-run]",
		Short: "Create a project from a topology file (all of it checked first: a bad file changes nothing)",
		Example: `  corpus project import site.yaml
  corpus project import site.yaml --as site2 --without-domains
  corpus project import site.yaml --env staging --from-env prod --without-domains
  corpus project import site.yaml --key site.key          # a file exported --with-secrets`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = os.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, 4<<20))
			if err != nil {
				return err
			}
			top, err := parseTopology(b)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if top.Sealed != "" {
				if keyFile == "" {
					return errors.New("the file holds encrypted values: give --key, the file `corpus project keygen --out` wrote")
				}
				if err := openTopology(top, keyFile); err != nil {
					return err
				}
			}
			return call(g, cmd.Context(), func(ctx context.Context, c *client.Clients) (*connect.Response[corpusv1.ImportProjectResponse], error) {
				return c.Projects.ImportProject(ctx, connect.NewRequest(&corpusv1.ImportProjectRequest{
					Topology: top, As: as, Env: env, FromEnv: fromEnv, WithoutDomains: withoutDomains, DryRun: dryRun}))
			}, func(msg *corpusv1.ImportProjectResponse) error {
				verb := "created"
				if dryRun {
					verb = "would create"
				}
				for _, c := range msg.Created {
					fmt.Fprintf(g.stdout, "%s %s\n", verb, c)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&as, "as", "", "name of the new project (default the file's)")
	f.StringVar(&env, "env", "", "import one environment under this name")
	f.StringVar(&fromEnv, "from-env", "", "with --env: which of the file's environments")
	f.BoolVar(&withoutDomains, "without-domains", false, "leave the domains out (a clone on the same cluster)")
	f.StringVar(&keyFile, "key", "", "private key for the file's encrypted values (corpus project keygen)")
	f.BoolVar(&dryRun, "dry-run", false, "check everything, create nothing")
	return cmd
}

// topologyYAML renders a topology as YAML through its API JSON.
func topologyYAML(top *corpusv1.ProjectTopology) ([]byte, error) {
	j, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(top)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		return nil, err
	}
	return yaml.Marshal(v)
}

// parseTopology reads a topology file strictly: an unknown field is an
// error, and so is an unknown version.
func parseTopology(b []byte) (*corpusv1.ProjectTopology, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	top := &corpusv1.ProjectTopology{}
	if err := protojson.Unmarshal(j, top); err != nil {
		return nil, fmt.Errorf("not a project topology: %w", err)
	}
	if top.Version != corpusv1.TopologyVersion {
		return nil, fmt.Errorf("topology version %q: this corpus reads %s", top.Version, corpusv1.TopologyVersion)
	}
	return top, nil
}

// sealTopology moves every value of top into its sealed field,
// encrypted to pub.
func sealTopology(top *corpusv1.ProjectTopology, pub hpke.PublicKey) error {
	vals := topologyValues{Envs: map[string]map[string]string{}, Services: map[string]map[string]string{}}
	for _, e := range top.Environments {
		if len(e.Config) > 0 {
			vals.Envs[e.Name], e.Config = e.Config, nil
		}
	}
	for _, s := range top.Services {
		if len(s.Secrets) > 0 {
			vals.Services[s.Name], s.Secrets = s.Secrets, nil
		}
	}
	plain, err := json.Marshal(vals)
	if err != nil {
		return err
	}
	ct, err := hpke.Seal(pub, hpke.HKDFSHA256(), hpke.AES256GCM(), []byte(sealedInfo), plain)
	if err != nil {
		return err
	}
	top.Sealed = base64.StdEncoding.EncodeToString(ct)
	return nil
}

// openTopology decrypts top's sealed values with the key in keyFile and
// puts them back in place.
func openTopology(top *corpusv1.ProjectTopology, keyFile string) error {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if !strings.HasPrefix(s, keyPrefix) {
		return errors.New("--key: not a key of `corpus project keygen`")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, keyPrefix))
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	priv, err := topologyKEM.NewPrivateKey(raw)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	ct, err := base64.StdEncoding.DecodeString(top.Sealed)
	if err != nil {
		return fmt.Errorf("the encrypted values: %w", err)
	}
	plain, err := hpke.Open(priv, hpke.HKDFSHA256(), hpke.AES256GCM(), []byte(sealedInfo), ct)
	if err != nil {
		return errors.New("the encrypted values do not open with this key (exported for another recipient, or changed)")
	}
	var vals topologyValues
	if err := json.Unmarshal(plain, &vals); err != nil {
		return err
	}
	for _, e := range top.Environments {
		if v, ok := vals.Envs[e.Name]; ok {
			e.Config = v
		}
	}
	for _, sv := range top.Services {
		if v, ok := vals.Services[sv.Name]; ok {
			sv.Secrets = v
		}
	}
	top.Sealed = ""
	return nil
}
