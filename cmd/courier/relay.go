package main

import "github.com/spf13/cobra"

// newRelayCmd is being written in this session.
func newRelayCmd() *cobra.Command { return &cobra.Command{Use: "relay", Hidden: true} }
