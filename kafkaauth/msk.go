package kafkaauth

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/aws/aws-msk-iam-sasl-signer-go/signer"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/courierkit/courier/internal/textcut"
)

// MSKIAM makes the OAUTHBEARER tokens of Amazon MSK's IAM access control
// (what MSK calls AWS_MSK_IAM): a request for kafka-cluster:Connect in the
// cluster's region, presigned with AWS Signature Version 4 by AWS's own
// signer (github.com/aws/aws-msk-iam-sasl-signer-go), valid 15 minutes.
// The credentials come from the standard AWS chain: the environment
// (AWS_ACCESS_KEY_ID, …), the shared config and credentials files and
// their profile, web identity (EKS IRSA: AWS_ROLE_ARN and
// AWS_WEB_IDENTITY_TOKEN_FILE), then the ECS or EC2 role. MSK's IAM
// listener takes TLS only (port 9098): set Connection.TLS.
type MSKIAM struct {
	// Region is the cluster's AWS region, e.g. eu-west-1.
	Region string
	// Profile, when set, is the shared config profile to take the
	// credentials from instead of the default one.
	Profile string
	// RoleARN, when set, is a role assumed (with STS) with the chain's
	// credentials; the tokens are signed with the role's.
	RoleARN string
	// SessionName names the assumed role's session; empty is "courier".
	SessionName string
	// Credentials, when set, replaces the chain (and Profile and RoleARN).
	Credentials aws.CredentialsProvider
	// Timeout bounds making one token, credentials included; 0 is
	// DefaultTokenTimeout.
	Timeout time.Duration
}

// awsRegion is the shape of an AWS region name: eu-west-1,
// us-gov-west-1, cn-north-1, us-isob-east-1, eusc-de-east-1.
var awsRegion = regexp.MustCompile(`^[a-z]{2,4}(-[a-z]+)+-[0-9]{1,2}$`)

// Tokens loads the AWS configuration (ctx bounds that) and returns the
// tokens; the credentials are fetched when a broker connection asks for a
// token, and again when they expire.
func (m MSKIAM) Tokens(ctx context.Context) (*Tokens, error) {
	if !awsRegion.MatchString(m.Region) {
		if m.Region == "" {
			return nil, errors.New("kafkaauth: AWS MSK IAM needs the cluster's region, e.g. eu-west-1")
		}
		return nil, fmt.Errorf("kafkaauth: AWS region %s is not a region name such as eu-west-1", strconv.QuoteToASCII(textcut.Cut(m.Region, 40, "…")))
	}
	source := "AWS MSK IAM in " + m.Region
	creds := m.Credentials
	if creds == nil {
		opts := []func(*config.LoadOptions) error{config.WithRegion(m.Region),
			config.WithCredentialsCacheOptions(func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = credentialsWindow })}
		if m.Profile != "" {
			opts = append(opts, config.WithSharedConfigProfile(m.Profile))
		}
		cfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, &TokenError{Source: source, Reason: "cannot load the AWS configuration: " + textcut.Line(err.Error(), 300, isControl) +
				" (check the profile's name against ~/.aws/config, or AWS_CONFIG_FILE)"}
		}
		creds = cfg.Credentials
		if m.RoleARN != "" {
			session := m.SessionName
			if session == "" {
				session = "courier"
			}
			creds = aws.NewCredentialsCache(stscreds.NewAssumeRoleProvider(sts.NewFromConfig(cfg), m.RoleARN, func(o *stscreds.AssumeRoleOptions) {
				o.RoleSessionName = session
			}), func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = credentialsWindow })
		}
	}
	if creds == nil {
		return nil, &TokenError{Source: source, Reason: "no AWS credentials: " + credentialsFix}
	}
	region := m.Region
	return NewTokens(source, func(ctx context.Context) (Token, error) {
		// A presigned token is good until it expires or its credentials
		// do, whichever comes first (an assumed role's session, say).
		c, err := creds.Retrieve(ctx)
		if err == nil {
			var token string
			var expiresMs int64
			token, expiresMs, err = signer.GenerateAuthTokenFromCredentialsProvider(ctx, region, credentials.StaticCredentialsProvider{Value: c})
			if err == nil {
				expiry := time.UnixMilli(expiresMs)
				if c.CanExpire && c.Expires.Before(expiry) {
					expiry = c.Expires
				}
				return Token{Value: token, Expiry: expiry}, nil
			}
		}
		if ctx.Err() != nil {
			return Token{}, ctx.Err()
		}
		return Token{}, &TokenError{Source: source, Reason: textcut.Line(err.Error(), 300, isControl) + " (" + credentialsFix + ")", Err: err}
	}, nil, m.Timeout)
}

// credentialsWindow is how long before temporary credentials expire (a
// role's session, EKS's web identity) the chain fetches new ones, so that
// a token signed with them lives long enough to be used.
const credentialsWindow = 5 * time.Minute

// credentialsFix says where the AWS chain looks for credentials.
const credentialsFix = "give this process AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE), " +
	"on EKS a service account annotated eks.amazonaws.com/role-arn (IRSA), or an ECS or EC2 role; the role needs kafka-cluster:Connect on the cluster"
