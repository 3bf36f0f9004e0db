package kfakeoauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// MSK verifies AWS MSK IAM tokens as MSK does: a base64url presigned
// request to https://kafka.<region>.amazonaws.com/ for the action
// kafka-cluster:Connect, signed (AWS Signature Version 4, service
// kafka-cluster) with the one access key it knows, not expired.
type MSK struct {
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken is the temporary credentials' token (an assumed
	// role's), which the request then carries signed.
	SessionToken string
	// Now is the broker's clock; nil is time.Now.
	Now func() time.Time
}

// emptyHash is the SHA-256 of an empty payload, which a presigned
// request signs.
const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Verify checks the token.
func (m MSK) Verify(token string, _ map[string]string) error {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return errors.New("the token is not base64url")
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		return fmt.Errorf("the token is no URL: %v", err)
	}
	q := u.Query()
	host := "kafka." + m.Region + ".amazonaws.com"
	credential := m.AccessKeyID + "/"
	switch {
	case u.Scheme != "https" || u.Host != host || u.Path != "/":
		return fmt.Errorf("the token is for %s://%s%s, not https://%s/", u.Scheme, u.Host, u.Path, host)
	case q.Get("Action") != "kafka-cluster:Connect":
		return fmt.Errorf("the token's action is %q", q.Get("Action"))
	case q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
		return fmt.Errorf("the token's algorithm is %q", q.Get("X-Amz-Algorithm"))
	case q.Get("X-Amz-SignedHeaders") != "host":
		return fmt.Errorf("the token signs the headers %q, not host", q.Get("X-Amz-SignedHeaders"))
	case len(q.Get("X-Amz-Credential")) < len(credential) || q.Get("X-Amz-Credential")[:len(credential)] != credential:
		return errors.New("the token is signed with an access key the broker does not know")
	}
	signed, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return fmt.Errorf("the token's X-Amz-Date %q", q.Get("X-Amz-Date"))
	}
	expires, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || expires <= 0 || expires > 900 {
		return fmt.Errorf("the token's X-Amz-Expires %q is not 1 to 900 seconds", q.Get("X-Amz-Expires"))
	}
	now := time.Now()
	if m.Now != nil {
		now = m.Now()
	}
	switch {
	case !now.Before(signed.Add(time.Duration(expires) * time.Second)):
		return fmt.Errorf("the token expired at %s", signed.Add(time.Duration(expires)*time.Second).Format(time.RFC3339))
	case signed.After(now.Add(5 * time.Minute)):
		return fmt.Errorf("the token is signed in the future, at %s", signed.Format(time.RFC3339))
	}
	// Sign the same request again with the key and compare.
	if q.Get("X-Amz-Security-Token") != m.SessionToken {
		return errors.New("the token carries another session token than the credentials the broker knows")
	}
	unsigned := url.Values{"Action": {q.Get("Action")}, "X-Amz-Expires": {q.Get("X-Amz-Expires")}}
	req, _ := http.NewRequest(http.MethodGet, (&url.URL{Scheme: "https", Host: host, Path: "/", RawQuery: unsigned.Encode()}).String(), nil)
	want, _, err := v4.NewSigner().PresignHTTP(context.Background(), aws.Credentials{AccessKeyID: m.AccessKeyID, SecretAccessKey: m.SecretAccessKey, SessionToken: m.SessionToken},
		req, emptyHash, "kafka-cluster", m.Region, signed)
	if err != nil {
		return fmt.Errorf("signing: %v", err)
	}
	wantURL, _ := url.Parse(want)
	if wantURL.Query().Get("X-Amz-Credential") != q.Get("X-Amz-Credential") {
		return fmt.Errorf("the token's credential scope %q is not %q", q.Get("X-Amz-Credential"), wantURL.Query().Get("X-Amz-Credential"))
	}
	if wantURL.Query().Get("X-Amz-Signature") != q.Get("X-Amz-Signature") {
		return errors.New("the token's signature does not match the request signed with the broker's key")
	}
	return nil
}
