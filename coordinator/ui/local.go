package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// call makes a unary API call in-process, as the browser of r (its
// address, for the API's login limits and audit) with bearer token tok
// ("" for none), and decodes the answer into res.
func (d *Dashboard) call(r *http.Request, tok, procedure string, req, res proto.Message) error {
	body, err := protojson.Marshal(req)
	if err != nil {
		return err
	}
	in, err := http.NewRequestWithContext(r.Context(), http.MethodPost, procedure, bytes.NewReader(body))
	if err != nil {
		return err
	}
	in.RemoteAddr = r.RemoteAddr
	in.Header.Set("Content-Type", "application/json")
	if tok != "" {
		in.Header.Set("Authorization", "Bearer "+tok)
	}
	out := &buffered{header: http.Header{}}
	d.cfg.API.ServeHTTP(out, in)
	if out.status != 0 && out.status != http.StatusOK {
		var e struct{ Code, Message string }
		if json.Unmarshal(out.body.Bytes(), &e) != nil || e.Message == "" {
			return errors.New(http.StatusText(out.status))
		}
		var code connect.Code
		if code.UnmarshalText([]byte(e.Code)) != nil {
			code = connect.CodeUnknown
		}
		return connect.NewError(code, errors.New(e.Message))
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(out.body.Bytes(), res)
}

// buffered is a ResponseWriter that keeps a unary answer.
type buffered struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *buffered) Header() http.Header { return b.header }

func (b *buffered) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *buffered) Write(p []byte) (int, error) {
	b.WriteHeader(http.StatusOK)
	return b.body.Write(p)
}
