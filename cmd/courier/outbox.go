package main

import "github.com/spf13/cobra"

// newOutboxCmd is being written in this session.
func newOutboxCmd() *cobra.Command { return &cobra.Command{Use: "outbox", Hidden: true} }
