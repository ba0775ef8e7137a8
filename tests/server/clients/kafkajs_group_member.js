#!/usr/bin/env node
// One consumer-group member of kafkajs 2.2.4, run as its own process (so a test can SIGKILL it):
//   node kafkajs_group_member.js '{"brokers": ["host:port"], "group": G, "topic": T, ...}'
// The kafkajs twin of group_member.py: it prints the same JSON lines on stdout (started, revoked
// (kafkajs's REBALANCING event: it names no partitions), assigned, consumed, committed, error,
// closed), and stops, disconnecting (LeaveGroup), on a line `close` or end-of-file on stdin, after
// `stop_after` records (committed first), on a crash, or after `max_run_s` seconds.
//
// Options: brokers, group, topic, client_id, session_timeout_ms, heartbeat_interval_ms,
// rebalance_timeout_ms, stop_after, max_run_s. kafkajs has no static membership
// (groupInstanceId is always null) and one assignor of its own (RoundRobinAssigner), so neither
// is an option. kafkajs heartbeats between fetches, so fetches wait at most 200 ms here
// (maxWaitTimeInMs; its default of 5 s would delay every rebalance).
'use strict'

const path = require('path')
const readline = require('readline')
// kafkajs from `npm ci` in js/, or from the node_modules dir LOGSTORE_TEST_NODE_MODULES names
const NODE_MODULES = process.env.LOGSTORE_TEST_NODE_MODULES || path.join(__dirname, 'js', 'node_modules')
const { Kafka, logLevel } = require(path.join(NODE_MODULES, 'kafkajs'))

const options = JSON.parse(process.argv[2])
const emit = (event, fields = {}) =>
  process.stdout.write(JSON.stringify({ event, t: Date.now() / 1000, ...fields }) + '\n')

async function main () {
  const kafka = new Kafka({
    clientId: options.client_id || 'logstore-group-test',
    brokers: options.brokers,
    logLevel: logLevel.WARN,
    logCreator: () => ({ level, log }) => process.stderr.write(`kafkajs ${level}: ${JSON.stringify(log)}\n`),
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 }
  })
  const consumer = kafka.consumer({
    groupId: options.group,
    sessionTimeout: options.session_timeout_ms || 6000,
    heartbeatInterval: options.heartbeat_interval_ms || 500,
    rebalanceTimeout: options.rebalance_timeout_ms || 15000,
    maxWaitTimeInMs: 200,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 }
  })
  const version = require(path.join(NODE_MODULES, 'kafkajs', 'package.json')).version
  emit('started', { pid: process.pid, client: 'kafkajs', version })

  let assignment = []
  let consumed = 0
  const nextOffsets = {}
  let stopWith = null
  const stopped = new Promise(resolve => { stopWith = resolve })

  consumer.on(consumer.events.GROUP_JOIN, e => {
    const partitions = (e.payload.memberAssignment[options.topic] || []).slice().sort((a, b) => a - b)
    assignment = partitions
    emit('assigned', { partitions, assignment, generation: null, member_id: e.payload.memberId })
  })
  consumer.on(consumer.events.REBALANCING, () => {
    // kafkajs revokes everything on a rebalance (eager only) without saying which partitions
    emit('revoked', { partitions: assignment, assignment: [] })
    assignment = []
  })
  consumer.on(consumer.events.CRASH, e => {
    const error = e.payload.error || {}
    emit('error', { error: error.type || error.name || 'CRASH', fatal: true, message: String(error.message || error) })
    stopWith('crash')
  })

  readline.createInterface({ input: process.stdin }).on('line', line => {
    if (line.trim() === 'close') stopWith('close')
  }).on('close', () => stopWith('eof'))
  const timer = setTimeout(() => {
    emit('error', { error: 'MAX_RUN_S', fatal: false, message: `ran ${options.max_run_s}s: closing` })
    stopWith('max_run_s')
  }, (options.max_run_s || 60) * 1000)

  await consumer.connect()
  await consumer.subscribe({ topics: [options.topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      if (options.stop_after != null && consumed >= options.stop_after) return
      const offset = Number(message.offset)
      nextOffsets[partition] = offset + 1
      consumed += 1
      const value = message.value === null ? null : message.value.toString('utf8')
      emit('consumed', { records: [[partition, offset, value]] })
      if (options.stop_after != null && consumed >= options.stop_after) stopWith('stop_after')
    }
  })
  const why = await stopped
  clearTimeout(timer)
  try {
    if (why === 'stop_after') {
      await consumer.commitOffsets(Object.entries(nextOffsets).map(
        ([partition, offset]) => ({ topic: options.topic, partition: Number(partition), offset: String(offset) })))
      emit('committed', { offsets: nextOffsets })
    }
  } finally {
    await consumer.disconnect()
    emit('closed')
  }
}

main().then(() => process.exit(0), e => {
  process.stderr.write(`kafkajs_group_member: ${e && e.stack ? e.stack : e}\n`)
  emit('error', { error: (e && e.type) || 'DRIVER_FAILED', fatal: true, message: String(e && e.message) })
  process.exit(2)
})
