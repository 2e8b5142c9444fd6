package status_test

import (
	"strings"
	"testing"

	"github.com/keyfleet/keyfleet/internal/status"
	"github.com/keyfleet/keyfleet/pkg/creds"
)

func TestClass(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"401 Unauthorized: {\"error\":\"patient Jane Roe\"}", "401 Unauthorized " + status.Hidden},
		{"http: 503 Service Unavailable: upstream", "503 Service Unavailable " + status.Hidden},
		{"429 Too Many Requests", "429 Too Many Requests " + status.Hidden},
		{"401 Patient Jane Roe: x", status.Hidden},
		{"exec: status permanent: CONFIDENTIAL-OUTPUT-42", status.Hidden},
		{"resting 2s (from Retry-After header) after: 429 Too Many Requests: body", status.Hidden},
	} {
		if got := status.Class(tc.in); got != tc.want {
			t.Errorf("Class(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Public keeps IDs, who and which signal, and an operator's own reason;
// it drops every text an API, a job or a probe wrote.
func TestReportPublic(t *testing.T) {
	r := status.Report{Pool: status.Pool{Credentials: []status.Credential{
		{ID: "a", CoolingReason: "resting 3s after: {\"ssn\":\"123-45-6789\"}", RestCause: "Retry-After header",
			DisabledBy: creds.DisabledByAPI, DisabledReason: "403 Forbidden: CONFIDENTIAL",
			Refusals:   []string{"b1/i1: 403 Forbidden: CONFIDENTIAL"},
			ScopeRests: []creds.ScopeRest{{Scope: "gpt-4o", Reason: "x-ratelimit says CONFIDENTIAL"}}},
		{ID: "b", DisabledBy: creds.DisabledByOperator, DisabledReason: "billing issue",
			EnabledBy: creds.EnabledByProbe, EnabledReason: "probe answered CONFIDENTIAL"},
	}}}
	pub := r.Public()
	text := strings.Join([]string{pub.Pool.Credentials[0].CoolingReason, pub.Pool.Credentials[0].DisabledReason,
		strings.Join(pub.Pool.Credentials[0].Refusals, ","), pub.Pool.Credentials[0].ScopeRests[0].Reason,
		pub.Pool.Credentials[1].EnabledReason}, "|")
	if strings.Contains(text, "CONFIDENTIAL") || strings.Contains(text, "123-45") {
		t.Errorf("Public kept job or API text: %s", text)
	}
	a, b := pub.Pool.Credentials[0], pub.Pool.Credentials[1]
	if a.RestCause != "Retry-After header" || a.Refusals[0] != "b1/i1: 403 Forbidden "+status.Hidden || b.DisabledReason != "billing issue" {
		t.Errorf("Public dropped what is ours: %+v / %+v", a, b)
	}
	if r.Pool.Credentials[0].CoolingReason == status.Hidden || r.Pool.Credentials[0].ScopeRests[0].Reason == status.Hidden {
		t.Error("Public changed the report it was called on")
	}
}
