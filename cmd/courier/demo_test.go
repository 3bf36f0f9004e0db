package main

import (
	"strings"
	"testing"
)

func TestDemoUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--orders", "5"}, // fewer than the default poison, slow and duplicated orders
		{"demo", "--poison", "-1"},
		{"demo", "--timeout", "0s"},
		{"demo", "--psp-outage", "-1s"},
		{"demo", "--schema", "public"}, // the demo drops its schema: only courier_demo… is taken
		{"demo", "--schema", "courier_demo/../x"},
		{"demo", "--output", "yaml"},
		{"demo", "extra"},
	} {
		if code, _, errOut := courier(t, args...); code != exitUsage || !strings.Contains(errOut, "courier --help") {
			t.Errorf("courier %v: exit %d, want %d\n%s", args, code, exitUsage, errOut)
		}
	}
}
