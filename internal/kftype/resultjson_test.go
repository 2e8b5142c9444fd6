package kftype_test

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/keyfleet/keyfleet/internal/kftype"
)

// FuzzResultJSON: Result.AppendJSON writes the bytes json.Marshal writes
// for the same result, and fails where it fails (a NaN duration, a zone
// offset of 24 hours or more).
func FuzzResultJSON(f *testing.F) {
	now := time.Date(2026, 11, 24, 2, 3, 4, 567891234, time.UTC).UnixNano()
	f.Add("item-1", "b1", "exec", kftype.OutcomeSucceeded, 1, 0.012345, "key-a", "", "out <b>\n", "", false, 0, "", "", int64(0), "w1", now, now, 0)
	f.Add("i\u2028\xff", "", "", kftype.OutcomeFailed, -3, 1e-9, "", "boom: \"quoted\"", "", "base64", true, 400, "req_1<", "", int64(1500), "", int64(0), now, 3600+1800)
	f.Add("x", "y", "z", "", math.MaxInt32, math.NaN(), "", "", "", "", false, -1, "", "batch_\x01", int64(-7), "", now, now, -7*3600)
	f.Add("x", "y", "z", "", 0, 2e21, "", "", "", "", false, 200, "r", "v", int64(math.MaxInt64), "", now, int64(math.MaxInt64), 0)
	f.Add("x", "y", "z", "", 0, 0.5, "", "", "", "", false, 0, "", "", int64(1_000_000_000), "", now, now, 25*3600) // no RFC 3339 form
	f.Fuzz(func(t *testing.T, item, batch, kind, outcome string, attempts int, dur float64, cred, errText, output, enc string,
		truncated bool, status int, requestID, via string, spent int64, worker string, leasedNs, finishedNs int64, offsetSec int) {
		zone := time.FixedZone("z", offsetSec%(30*3600))
		r := kftype.Result{
			Item: item, Batch: batch, Kind: kind, Outcome: outcome, Attempts: attempts, Duration: dur,
			CredentialID: cred, Error: errText, Output: output, OutputEncoding: enc, OutputTruncated: truncated,
			StatusCode: status, RequestID: requestID, Via: via, Spend: kftype.Amount(spent),
			Worker: worker, FinishedAt: time.Unix(0, finishedNs).In(zone),
		}
		if leasedNs != 0 {
			r.LeasedAt = time.Unix(0, leasedNs).In(zone)
		}
		want, wantErr := json.Marshal(r)
		got, err := r.AppendJSON(nil)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("AppendJSON error %v, json.Marshal error %v", err, wantErr)
		}
		if err == nil && string(got) != string(want) {
			t.Fatalf("AppendJSON:   %s\njson.Marshal: %s", got, want)
		}
	})
}

// TestResultJSONAllocs: a typical result is encoded in one allocation.
func TestResultJSONAllocs(t *testing.T) {
	r := kftype.Result{Item: "item-000123", Batch: "batch-2026-11-24", Kind: "http", Outcome: kftype.OutcomeSucceeded,
		Attempts: 1, Duration: 0.25, CredentialID: "key-a", Output: `{"answer":"<some text>"}`, Worker: "host-1",
		LeasedAt: time.Now(), FinishedAt: time.Now()}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.AppendJSON(nil); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("%v allocations per encoding, want 1", n)
	}
}

// A result of an item that ran on a fallback kind names where it came
// from and why, in the bytes json.Marshal writes.
func TestResultJSONFallback(t *testing.T) {
	now := time.Date(2026, 11, 24, 2, 3, 4, 5, time.UTC)
	for _, r := range []kftype.Result{
		{Item: "i1", Batch: "b1", Kind: "chat-azure", Outcome: kftype.OutcomeSucceeded, CredentialID: "az-1",
			FallbackFrom: "chat", FallbackReason: kftype.FallbackFailing, Spend: 15, Worker: "w", FinishedAt: now},
		{Item: "i2", Kind: "x", FallbackFrom: "\"q\"\u2028", FinishedAt: now},
		{Item: "i3", Kind: "x", FallbackReason: kftype.FallbackWaited, FinishedAt: now},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.AppendJSON(nil)
		if err != nil || string(got) != string(want) {
			t.Errorf("AppendJSON: %s (%v)\njson.Marshal: %s", got, err, want)
		}
	}
}
