#!/usr/bin/env node
// kafkajs 2.2.4's transactions against `logstore serve` (driven by tests/server/test_txn_kafkajs.py).
//
// Reads one JSON command on stdin, runs it with kafkajs, prints one JSON line on stdout:
// {"ok": <result>} or {"error": {"type": <Kafka error name>, "code": <int|null>, "message": ...}}.
// Values cross the JSON boundary as UTF-8 strings. kafkajs logs go to stderr, never stdout.
//
// Commands (all carry "brokers": ["host:port"]):
//   transactions  transactional_id, plan: [{commit: bool, records: [[topic, partition, value]],
//                 offsets: {group, topic, partition, offset} | absent}] -> null
//                 One producer (transactionalId, idempotent, maxInFlightRequests 1): per entry a
//                 transaction(), its sends, sendOffsets when given, then commit() or abort().
//   consume       topics, partitions (per topic), read_uncommitted, group, end_value
//                 -> [[topic, partition, offset, value]] in the order consumed: a group consumer
//                 (subscribe fromBeginning) reads until it has seen the record whose value is
//                 end_value in every partition (the test appends one after its transactions),
//                 so no wait depends on time.
//   transform     source, sink, group, transactional_id, rounds: [{count, commit}]
//                 -> [[offset of the last record taken, ...] per round]: consume-transform-produce.
//                 A group consumer (autoCommit off, read_committed) takes `count` records of the
//                 one-partition source per round; a transaction writes each value with "in"
//                 replaced by "out" to the sink's partition 0, sends the next offset with
//                 sendOffsets, and commits or aborts. After an aborted round the consumer seeks
//                 back to the group's committed offset, as an exactly-once loop does.
//   fence         topic, transactional_id -> {zombie_error: {type, code}}: a producer opens a
//                 transaction and sends; a second producer with the same transactionalId
//                 connects (InitProducerId fences the first), sends and commits; then the first
//                 one's commit() is tried and its error returned.
'use strict'

const path = require('path')
const NODE_MODULES = process.env.LOGSTORE_TEST_NODE_MODULES || path.join(__dirname, 'node_modules')
const { Kafka, logLevel } = require(path.join(NODE_MODULES, 'kafkajs'))
const { brokerError, runMain } = require(path.join(__dirname, '..', 'kafkajs_driver.js'))  // one command loop

function kafkaFor (command) {
  return new Kafka({
    clientId: 'logstore-tests-kafkajs-txn',
    brokers: command.brokers,
    logLevel: logLevel.ERROR,
    logCreator: () => ({ level, log }) => process.stderr.write(`kafkajs ${level}: ${JSON.stringify(log)}\n`),
    connectionTimeout: 5000,
    requestTimeout: 15000,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 }
  })
}

function transactionalProducer (kafka, transactionalId) {
  return kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
}

async function runTransaction (producer, entry) {
  const transaction = await producer.transaction()
  try {
    for (const [topic, partition, value] of entry.records) {
      await transaction.send({ topic, messages: [{ key: 'k', value, partition }] })
    }
    if (entry.offsets) {
      const o = entry.offsets
      await transaction.sendOffsets({
        consumerGroupId: o.group,
        topics: [{ topic: o.topic, partitions: [{ partition: o.partition, offset: String(o.offset) }] }]
      })
    }
  } catch (e) {
    await transaction.abort()
    throw e
  }
  if (entry.commit) await transaction.commit()
  else await transaction.abort()
}

async function transactions (kafka, command) {
  const producer = transactionalProducer(kafka, command.transactional_id)
  await producer.connect()
  try {
    for (const entry of command.plan) await runTransaction(producer, entry)
  } finally {
    await producer.disconnect()
  }
  return null
}

async function consume (kafka, command) {
  const consumer = kafka.consumer({
    groupId: command.group,
    readUncommitted: command.read_uncommitted,
    maxWaitTimeInMs: 200,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 }
  })
  const waiting = new Set()
  for (const topic of command.topics) {
    for (let p = 0; p < command.partitions; p++) waiting.add(`${topic}/${p}`)
  }
  const seen = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: command.topics, fromBeginning: true })
    await new Promise((resolve, reject) => {
      consumer.on(consumer.events.CRASH, e => reject(e.payload.error))
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ topic, partition, message }) => {
          const value = message.value === null ? null : message.value.toString('utf8')
          seen.push([topic, partition, Number(message.offset), value])
          if (value === command.end_value) {
            waiting.delete(`${topic}/${partition}`)
            if (waiting.size === 0) resolve()
          }
        }
      }).catch(reject)
    })
  } finally {
    await consumer.disconnect()
  }
  return seen
}

async function transform (kafka, command) {
  const consumer = kafka.consumer({ groupId: command.group, maxWaitTimeInMs: 200,
                                    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 } })
  const producer = transactionalProducer(kafka, command.transactional_id)
  await producer.connect()
  await consumer.connect()
  const taken = []
  const results = []
  let round = 0
  try {
    await consumer.subscribe({ topics: [command.source], fromBeginning: true })
    await new Promise((resolve, reject) => {
      consumer.on(consumer.events.CRASH, e => reject(e.payload.error))
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (round >= command.rounds.length) return
          taken.push(message)
          const { count, commit } = command.rounds[round]
          if (taken.length < count) return
          const batch = taken.splice(0)
          const last = Number(batch[batch.length - 1].offset)
          const records = batch.map(m => [command.sink, 0, m.value.toString('utf8').replace('in', 'out')])
          await runTransaction(producer, {
            commit,
            records,
            offsets: { group: command.group, topic: command.source, partition, offset: last + 1 }
          })
          results.push(batch.map(m => Number(m.offset)))
          round += 1
          if (round >= command.rounds.length) resolve()
          else if (!commit) {
            // exactly-once: after an abort, read again from the group's committed offset (kafkajs
            // drops the rest of the fetched batch after a seek)
            const offset = await committedOffset(kafka, command.group, command.source)
            consumer.seek({ topic: command.source, partition, offset })
          }
        }
      }).catch(reject)
    })
  } finally {
    await consumer.disconnect()
    await producer.disconnect()
  }
  return results
}

async function committedOffset (kafka, group, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const [entry] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    const offset = Number(entry.partitions.find(p => p.partition === 0).offset)
    return String(offset < 0 ? 0 : offset)
  } finally {
    await admin.disconnect()
  }
}

async function fence (kafka, command) {
  const zombie = transactionalProducer(kafka, command.transactional_id)
  const successor = transactionalProducer(kafka, command.transactional_id)
  await zombie.connect()
  try {
    const open = await zombie.transaction()
    await open.send({ topic: command.topic, messages: [{ value: 'from the zombie', partition: 0 }] })
    await successor.connect()
    try {
      await runTransaction(successor, { commit: true, records: [[command.topic, 0, 'from the successor']] })
    } finally {
      await successor.disconnect()
    }
    try {
      await open.commit()
    } catch (e) {
      const found = brokerError(e)
      return { zombie_error: { type: found.type || e.name, code: Number.isInteger(found.code) ? found.code : null } }
    }
    return { zombie_error: null }
  } finally {
    await zombie.disconnect()
  }
}

const commands = { transactions, consume, transform, fence }

runMain('kafkajs_txn', commands, kafkaFor)
