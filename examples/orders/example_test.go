package main

import (
	"fmt"
	"os"
)

// The service's flags, with the environment's defaults.
func Example_parseConfig() {
	cfg, err := parseConfig([]string{"--brokers", "kafka-1:9092,kafka-2:9092", "--schema", "shop"}, os.Getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Brokers, cfg.Schema, cfg.Topic)
	// Output: [kafka-1:9092 kafka-2:9092] shop orders
}
