#!/usr/bin/env node
// kafkajs 2.2.4 for the real-client tests of `logstore serve` (driven by kafkajs_driver.py).
//
// Reads one JSON command on stdin, runs it with kafkajs, prints one JSON line on stdout:
// {"ok": <result>} or {"error": {"type": <Kafka error name>, "code": <int|null>, "message": ...}}.
// Keys, values and header values cross the JSON boundary as base64 (null stays null), so every
// byte round-trips. kafkajs resolves modules from tests/server/clients/js/node_modules (installed
// by `npm ci` there; .ci/run does it). kafkajs logs go to stderr, never stdout.
//
// Commands (all carry "brokers": ["host:port"]):
//   produce        topic, acks, compression ("none" | "gzip"), partition (int|null),
//                  records: [{key, value, headers: [[name, value]], timestamp (int|null)}]
//                  -> [[partition, offset|null]] per record, in order
//   create_topic   topic, partitions, replication_factor, config {name: value}, validate_only -> null
//   describe_configs topic -> {name: value}
//   delete_topic   topic -> null
//   delete_records topic, partition, offset -> the new low watermark
//   list_offset    topic, partition, spec ("earliest" | "latest" | {"timestamp": ms}) -> offset
//                  (-1 for a timestamp after every record)
//   list_topics    -> [names]
// Any command may carry "ssl" ({ca, cert, key}: PEM file paths, or true) and "sasl" (kafkajs's own
// {mechanism: "plain" | "scram-sha-256" | "scram-sha-512", username, password}).
'use strict'

const fs = require('fs')
const path = require('path')
// kafkajs from `npm ci` in js/, or from the node_modules dir LOGSTORE_TEST_NODE_MODULES names
const NODE_MODULES = process.env.LOGSTORE_TEST_NODE_MODULES || path.join(__dirname, 'js', 'node_modules')
const { Kafka, CompressionTypes, ConfigResourceTypes, logLevel, Partitioners } =
  require(path.join(NODE_MODULES, 'kafkajs'))

const fromB64 = v => (v === null || v === undefined ? null : Buffer.from(v, 'base64'))

function sslFor (ssl) {
  if (!ssl || ssl === true) return ssl || undefined
  const read = file => (file ? fs.readFileSync(file) : undefined)
  return { ca: ssl.ca ? [read(ssl.ca)] : undefined, cert: read(ssl.cert), key: read(ssl.key) }
}

function kafkaFor (command) {
  return new Kafka({
    clientId: 'logstore-tests-kafkajs',
    brokers: command.brokers,
    ssl: sslFor(command.ssl),
    sasl: command.sasl || undefined,
    logLevel: logLevel.ERROR,
    logCreator: () => ({ level, log }) => process.stderr.write(`kafkajs ${level}: ${JSON.stringify(log)}\n`),
    connectionTimeout: 5000,
    requestTimeout: 15000,
    // Few, short retries: a broker error must come back as an error quickly, not after a minute.
    retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 1000 }
  })
}

// kafkajs headers are an object: names in insertion order, a repeated name as an array of values.
// Refuse what that cannot express (a name repeated after another one, an integer-like name that
// JavaScript would move to the front) rather than send something else.
function headersObject (pairs) {
  const headers = {}
  let last = null
  for (const [name, value] of pairs) {
    if (/^\d+$/.test(name)) throw new Error(`kafkajs cannot keep the order of the header name ${name}`)
    if (Object.prototype.hasOwnProperty.call(headers, name)) {
      if (name !== last) throw new Error(`kafkajs cannot interleave the repeated header ${name}`)
      headers[name] = [].concat(headers[name], [fromB64(value)])
    } else {
      headers[name] = fromB64(value)
    }
    last = name
  }
  return headers
}

async function produce (kafka, command) {
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: true })
  await producer.connect()
  try {
    const messages = command.records.map(r => {
      const message = { key: fromB64(r.key), value: fromB64(r.value), headers: headersObject(r.headers) }
      if (r.timestamp !== null && r.timestamp !== undefined) message.timestamp = String(r.timestamp)
      if (command.partition !== null && command.partition !== undefined) message.partition = command.partition
      return message
    })
    const compression = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }[command.compression]
    if (compression === undefined) throw new Error(`kafkajs has no ${command.compression} codec without plugins`)
    const metadata = await producer.send({ topic: command.topic, acks: command.acks, compression, messages })
    if (command.acks === 0) {
      // no response, so no offsets (kafkajs returns []); the partition only when it was given
      return messages.map(m => [m.partition === undefined ? null : m.partition, null])
    }
    // One batch per partition, records in order: the i-th record sent to partition p has offset
    // baseOffset(p) + i. kafkajs does not say which partition its partitioner chose per record,
    // so without an explicit partition the topic must have one partition.
    const base = {}
    for (const m of metadata) base[m.partition] = BigInt(m.baseOffset)
    const seen = {}
    return messages.map(m => {
      const p = m.partition === undefined ? (Object.keys(base).length === 1 ? Number(Object.keys(base)[0]) : null) : m.partition
      if (p === null) throw new Error('give a partition when producing to several partitions')
      seen[p] = (seen[p] || 0n)
      const offset = base[p] + seen[p]
      seen[p] += 1n
      return [p, Number(offset)]
    })
  } finally {
    await producer.disconnect()
  }
}

async function withAdmin (kafka, fn) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

const commands = {
  produce,
  create_topic: (kafka, c) => withAdmin(kafka, async admin => {
    const created = await admin.createTopics({
      validateOnly: c.validate_only,
      waitForLeaders: !c.validate_only,
      timeout: 10000,
      topics: [{
        topic: c.topic,
        numPartitions: c.partitions,
        replicationFactor: c.replication_factor,
        configEntries: Object.entries(c.config || {}).map(([name, value]) => ({ name, value: String(value) }))
      }]
    })
    // kafkajs answers TOPIC_ALREADY_EXISTS with `false` instead of an error: report it as one
    if (!created && !c.validate_only) {
      const error = new Error(`topic ${c.topic} already exists`)
      error.type = 'TOPIC_ALREADY_EXISTS'
      error.code = 36
      throw error
    }
    return null
  }),
  create_partitions: (kafka, c) => withAdmin(kafka, async admin => {
    const topicPartitions = [{ topic: c.topic, count: c.count }]
    if (c.assignments) topicPartitions[0].assignments = c.assignments
    await admin.createPartitions({ validateOnly: c.validate_only, timeout: 10000, topicPartitions })
    return null
  }),
  describe_configs: (kafka, c) => withAdmin(kafka, async admin => {
    const answer = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: c.topic }]
    })
    const entries = {}
    for (const resource of answer.resources) {
      if (resource.errorCode) {
        const error = new Error(resource.errorMessage || `error ${resource.errorCode}`)
        error.code = resource.errorCode
        throw error
      }
      for (const entry of resource.configEntries) entries[entry.configName] = entry.configValue
    }
    return entries
  }),
  delete_topic: (kafka, c) => withAdmin(kafka, async admin => {
    await admin.deleteTopics({ topics: [c.topic], timeout: 10000 })
    return null
  }),
  delete_records: (kafka, c) => withAdmin(kafka, async admin => {
    // deleteTopicRecords looks the leaders up in metadata it does not load itself
    // (KafkaJSTopicMetadataNotLoaded otherwise)
    await admin.fetchTopicMetadata({ topics: [c.topic] })
    await admin.deleteTopicRecords({ topic: c.topic, partitions: [{ partition: c.partition, offset: String(c.offset) }] })
    // kafkajs does not return the low watermark: ask for it (ListOffsets earliest)
    const offsets = await admin.fetchTopicOffsets(c.topic)
    return Number(offsets.find(p => p.partition === c.partition).low)
  }),
  list_offset: (kafka, c) => withAdmin(kafka, async admin => {
    if (c.spec === 'earliest' || c.spec === 'latest') {
      const offsets = await admin.fetchTopicOffsets(c.topic)
      const p = offsets.find(o => o.partition === c.partition)
      return Number(c.spec === 'earliest' ? p.low : p.high)
    }
    // kafkajs answers "no record at or after the timestamp" (-1 from the broker) with the high
    // watermark; every found offset is below it, so the high watermark means -1 here.
    const found = await admin.fetchTopicOffsetsByTimestamp(c.topic, c.spec.timestamp)
    const high = (await admin.fetchTopicOffsets(c.topic)).find(o => o.partition === c.partition).high
    const offset = found.find(o => o.partition === c.partition).offset
    return offset === high ? -1 : Number(offset)
  }),
  list_topics: (kafka, c) => withAdmin(kafka, admin => admin.listTopics())
}

// The broker's error inside whatever kafkajs wrapped it in (aggregate, per-partition, retry).
function brokerError (e) {
  const queue = [e]
  while (queue.length) {
    const x = queue.shift()
    if (!x || typeof x !== 'object') continue
    if (typeof x.type === 'string' && x.type !== 'UNKNOWN' && Number.isInteger(x.code)) return x
    queue.push(x.originalError, x.cause, ...(x.errors || []), ...((x.partitions || []).map(p => p.error)))
  }
  return e
}

// Read one JSON command on stdin, run it with ``commands[op](kafkaFor(command), command)``, print one
// JSON line: {"ok": <result>} or {"error": {type, code, message}} (the broker's error, unwrapped).
async function serve (commands, kafkaFor) {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const command = JSON.parse(Buffer.concat(chunks).toString('utf8'))
  const run = commands[command.op]
  if (!run) throw new Error(`unknown op ${command.op}`)
  try {
    const result = await run(kafkaFor(command), command)
    process.stdout.write(JSON.stringify({ ok: result }) + '\n')
  } catch (e) {
    const found = brokerError(e)
    process.stdout.write(JSON.stringify({
      error: { type: found.type || e.name, code: Number.isInteger(found.code) ? found.code : null, message: String(e.message || e) }
    }) + '\n')
  }
}

// A driver script's main: ``serve``, exit 0; a failure outside a command (bad input) exits 2.
function runMain (name, commands, kafkaFor) {
  serve(commands, kafkaFor).then(() => process.exit(0), e => {
    process.stderr.write(`${name}: ${e && e.stack ? e.stack : e}\n`)
    process.exit(2)
  })
}

module.exports = { brokerError, runMain }

if (require.main === module) runMain('kafkajs_driver', commands, kafkaFor)
