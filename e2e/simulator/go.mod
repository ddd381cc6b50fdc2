module deployctl.local/e2e/simulator

go 1.26
