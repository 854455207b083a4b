// kafkajs (2.2.x) as a test peer: one operation per run, driven by tests/peers/kafkajs.py.
//
//   node kafkajs_runner.js <mode> '<json arguments>'
//
// Prints one JSON object per line on stdout ({"event": ...}); kafkajs's own log goes to
// stderr.  Exits 0 on success; on failure prints {"event": "error", "name", "message"}
// and exits 1.  Common arguments: brokers (["host:port"]), clientId, retries,
// requestTimeout (ms).
//
// Modes:
//   create-topic    topic, partitions                      -> {"event": "created"}
//   produce         topic, count, prefix                   -> {"event": "produced", "count", "offsets"}
//                   (key "<prefix>-key-<i>", value "<prefix>-value-<i>", header "i")
//   topic-offsets   topic                                  -> {"event": "topic_offsets", "partitions": [...]}
//   fetch           topic, partitions (ids), maxWaitTime    -> {"event": "record", ...} lines, {"event": "fetched"}
//                   (plain Fetch requests through kafkajs's own broker code: no group)
//   consume         topic, groupId, count, sessionTimeout,  -> {"event": "joined"}, {"event": "record"} lines,
//                   heartbeatInterval, lingerMs                {"event": "consumed", "count"} after committing
//                   (consumer.run with a group, staying lingerMs after the count; offsets committed
//                   before it leaves)
//   list-groups                                            -> {"event": "groups", "groups": [...]}
//   describe-groups groupIds                               -> {"event": "described", "groups": [...]}
//   fetch-offsets   groupId, topics                        -> {"event": "offsets", "topics": [...]}
//   delete-groups   groupIds                               -> {"event": "deleted", "results": [...]}
'use strict'

const { Kafka, logLevel } = require('kafkajs')

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields || {})) + '\n')
}

function logCreator() {
  return ({ namespace, level, label, log }) => {
    process.stderr.write(JSON.stringify({ level: label, namespace, message: log.message, error: log.error }) + '\n')
  }
}

function client(args) {
  return new Kafka({
    clientId: args.clientId || 'kafkajs-peer',
    brokers: args.brokers,
    logLevel: logLevel.WARN,
    logCreator,
    connectionTimeout: 3000,
    requestTimeout: args.requestTimeout || 10000,
    retry: { retries: args.retries === undefined ? 5 : args.retries, initialRetryTime: 100, maxRetryTime: 2000 },
  })
}

const text = buffer => (buffer === null || buffer === undefined ? null : buffer.toString())

function recordFields(topic, partition, message) {
  const headers = {}
  for (const [k, v] of Object.entries(message.headers || {})) headers[k] = text(v)
  return { topic, partition, offset: Number(message.offset), key: text(message.key), value: text(message.value), headers }
}

// The Cluster object kafkajs builds for its producer and consumer: private, reached by its symbol.
function cluster(kafka) {
  const symbol = Object.getOwnPropertySymbols(kafka).find(s => s.description === 'private:Kafka:createCluster')
  return kafka[symbol]({ metadataMaxAge: 300000, allowAutoTopicCreation: false, isolationLevel: 1 })
}

async function withAdmin(kafka, use) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await use(admin)
  } finally {
    await admin.disconnect()
  }
}

const modes = {
  async 'create-topic'(kafka, args) {
    await withAdmin(kafka, async admin => {
      await admin.createTopics({ topics: [{ topic: args.topic, numPartitions: args.partitions || 1 }], waitForLeaders: true })
      emit('created', { topic: args.topic })
    })
  },

  async produce(kafka, args) {
    const producer = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    try {
      const messages = []
      for (let i = 0; i < args.count; i++) {
        messages.push({ key: `${args.prefix}-key-${i}`, value: `${args.prefix}-value-${i}`, headers: { i: String(i) } })
      }
      const result = await producer.send({ topic: args.topic, messages, acks: -1 })
      emit('produced', { count: messages.length, offsets: result.map(r => ({ partition: r.partition, baseOffset: Number(r.baseOffset) })) })
    } finally {
      await producer.disconnect()
    }
  },

  async 'topic-offsets'(kafka, args) {
    await withAdmin(kafka, async admin => {
      const partitions = await admin.fetchTopicOffsets(args.topic)
      emit('topic_offsets', {
        partitions: partitions.map(p => ({ partition: p.partition, low: Number(p.low), high: Number(p.high), offset: Number(p.offset) })),
    })
    })
  },

  async fetch(kafka, args) {
    const c = cluster(kafka)
    await c.connect()
    try {
      await c.addTargetTopic(args.topic)
      const ends = {}
      const [latest] = await c.fetchTopicsOffset([
        { topic: args.topic, partitions: args.partitions.map(partition => ({ partition })) },
      ])
      for (const { partition, offset } of latest.partitions) {
        ends[partition] = Number(offset)
      }
      let count = 0
      const byLeader = c.findLeaderForPartitions(args.topic, args.partitions)
      for (const [nodeId, partitions] of Object.entries(byLeader)) {
        const broker = await c.findBroker({ nodeId })
        const positions = {}
        for (const p of partitions) positions[p] = 0
        while (partitions.some(p => positions[p] < ends[p])) {
          const wanted = partitions.filter(p => positions[p] < ends[p])
          const response = await broker.fetch({
            replicaId: -1, isolationLevel: 1, maxWaitTime: args.maxWaitTime || 100, minBytes: 1, maxBytes: 1 << 20,
            topics: [{ topic: args.topic, partitions: wanted.map(p => ({ partition: p, fetchOffset: String(positions[p]), maxBytes: 1 << 20 })) }],
          })
          for (const topic of response.responses) {
            for (const partition of topic.partitions) {
              if (partition.errorCode) throw new Error(`fetch ${topic.topicName}-${partition.partition}: error ${partition.errorCode}`)
              for (const message of partition.messages) {
                if (Number(message.offset) < positions[partition.partition]) continue
                emit('record', recordFields(topic.topicName, partition.partition, message))
                positions[partition.partition] = Number(message.offset) + 1
                count++
              }
            }
          }
        }
      }
      emit('fetched', { count })
    } finally {
      await c.disconnect()
    }
  },

  async consume(kafka, args) {
    const consumer = kafka.consumer({
      groupId: args.groupId,
      sessionTimeout: args.sessionTimeout || 10000,
      heartbeatInterval: args.heartbeatInterval || 1000,
      retry: { retries: args.retries === undefined ? 5 : args.retries, initialRetryTime: 100, maxRetryTime: 2000 },
    })
    let count = 0
    let done
    const finished = new Promise((resolve, reject) => {
      done = resolve
      consumer.on(consumer.events.CRASH, event => reject(event.payload.error))
    })
    consumer.on(consumer.events.GROUP_JOIN, event => {
      emit('joined', { memberId: event.payload.memberId, leaderId: event.payload.leaderId, assignment: event.payload.memberAssignment })
    })
    await consumer.connect()
    try {
      await consumer.subscribe({ topics: [args.topic], fromBeginning: true })
      await consumer.run({
        autoCommit: true,
        eachMessage: async ({ topic, partition, message }) => {
          emit('record', recordFields(topic, partition, message))
          count++
          if (count >= args.count) done()
        },
      })
      await finished
      if (args.lingerMs) await new Promise(resolve => setTimeout(resolve, args.lingerMs))  // heartbeats go on
    } finally {
      await consumer.disconnect()  // commits the resolved offsets, then leaves the group
    }
    emit('consumed', { count })
  },

  async 'list-groups'(kafka) {
    await withAdmin(kafka, async admin => {
      const { groups } = await admin.listGroups()
      emit('groups', { groups })
    })
  },

  async 'describe-groups'(kafka, args) {
    await withAdmin(kafka, async admin => {
      const { groups } = await admin.describeGroups(args.groupIds)
      emit('described', {
        groups: groups.map(g => ({
          groupId: g.groupId, state: g.state, protocolType: g.protocolType, protocol: g.protocol,
          members: g.members.map(m => ({ memberId: m.memberId, clientId: m.clientId })),
        })),
    })
    })
  },

  async 'fetch-offsets'(kafka, args) {
    await withAdmin(kafka, async admin => {
      const topics = await admin.fetchOffsets({ groupId: args.groupId, topics: args.topics })
      emit('offsets', {
        topics: topics.map(t => ({
          topic: t.topic,
          partitions: t.partitions.map(p => ({ partition: p.partition, offset: Number(p.offset), metadata: p.metadata })),
        })),
    })
    })
  },

  async 'delete-groups'(kafka, args) {
    await withAdmin(kafka, async admin => {
      const results = await admin.deleteGroups(args.groupIds)
      emit('deleted', { results: results.map(r => ({ groupId: r.groupId, errorCode: r.errorCode })) })
    })
  },
}

async function main() {
  const [mode, json] = process.argv.slice(2)
  if (!modes[mode]) throw new Error(`unknown mode ${mode}; modes: ${Object.keys(modes).join(', ')}`)
  const args = JSON.parse(json || '{}')
  await modes[mode](client(args), args)
}

main().then(
  () => process.exit(0),
  error => {
    emit('error', { name: error.name, message: error.message, type: error.type || null })
    process.exit(1)
  }
)
