package main

import (
	"fmt"
	"os"
)

// The job's flags: which dead letters it replays, how fast, how often.
func Example_parseConfig() {
	cfg, err := parseConfig([]string{"--topic", "payouts.dlq", "--error", "psp timeout", "--rate", "50", "--once"}, os.Getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("replay %s where the error contains %q, failed within %v, at most %v/s, once: %v\n",
		cfg.Topic, cfg.Error, cfg.Since, cfg.Rate, cfg.Once)
	// Output: replay payouts.dlq where the error contains "psp timeout", failed within 24h0m0s, at most 50/s, once: true
}
