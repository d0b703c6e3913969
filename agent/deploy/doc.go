// Package deploy is the agent's release pipeline for the project
// environments whose guests are on its node: the git side of the node's
// SSH endpoint (one bare repository per environment, git-receive-pack
// whose pre-receive hook hands the push to the pipeline, so the ref moves
// only when the deploy succeeded), the project contract a pushed tree is
// checked against (.corpus/corpus.yaml, install.d, hooks, Procfile),
// the steps and hooks run in the guest, the rollout of a release's
// processes beside the old ones, releases without a push (a config
// change, corpus deploy, a restart of the processes), releases made from
// an OCI image (image.go, the tree from imagetree), rollbacks, and the
// deploy journal that resolves what a crash interrupted.
//
// A push runs, inside the project's guest, in /srv/projects/NAME:
//
//	archive       record the serving release in archives/rPREV and run its
//	              .corpus/archive hook (dumps of data/)
//	release-sync  unpack the pushed tree into releases/rN (via rN.tmp)
//	install       run .corpus/install.d/* in order in releases/rN
//	fixperms      .corpus/fixperms, or chown the release to corpus.yaml user:
//	start         start the release's processes (Procfile) beside the old
//	              ones, web on the environment's other port, and wait
//	              until web answers there
//	health        ask the guest's health URL (corpus.yaml health:), when
//	              there is no web process
//	switch        point current at releases/rN: one rename; then the
//	              routes at the new web port
//	notify        .corpus/notify, or say the release is live
//
// Once the release is recorded, the old processes get the requests they
// serve finished and are stopped.
//
// Nothing the serving release uses changes before switch. When a step
// fails, current is left as it was, the serving release's .corpus/rollback
// hook runs, the failed tree stays for inspection, and the push is
// rejected. Each step is written to the agent's journal first, so a crash
// is resolved on restart: a deploy that did not finish is rolled back.
//
// What the pipeline needs from the agent is small. Config hands over the
// agent's shared components: the cache (the deploy journal), the runtime
// (the guests' process supervisors), the log store (deploy lines in the
// guest's log), the proxy (watched while web moves to its new port), the
// metrics registry and a logger. The Agent interface gives the rest: a
// guest of the node by name with its driver (for exec), whether the
// desired state is known yet, and calls to the coordinator with the
// agent's failover (releases, web ports, domains, git access). The agent
// wires the pipeline in: it runs Pipeline.Run, hands the git commands of
// its SSH endpoint to ServeGit, and passes its API's Redeploy, Rollback
// and Processes calls through once it has checked the caller.
package deploy
