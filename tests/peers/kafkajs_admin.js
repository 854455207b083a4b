// kafkajs (2.2.x)'s admin client against our brokers: the admin run of
// tests/broker/test_admin_apis.py, driven by tests/peers/test_kafkajs_admin.py.
//
//   node kafkajs_admin.js '<json arguments>'
//
// Arguments: brokers (["host:port"]), topic, partitions (to create), grownTo (the count
// createPartitions asks for), retentionMs (a string: alterConfigs' value), records (how
// many to produce to partition 0), deleteBefore (deleteTopicRecords' offset there).
//
// Steps: createTopics; describeConfigs of the topic (TOPIC) and of one broker (BROKER);
// alterConfigs retention.ms on the topic, read back with describeConfigs; createPartitions
// to grownTo, seen by fetchTopicMetadata; produce records to partition 0,
// deleteTopicRecords up to deleteBefore, then fetchTopicOffsets and
// fetchTopicOffsetsByTimestamp(0) for the low watermark.
//
// Prints one JSON object per line on stdout ({"event": ...}): a "step" line as each call
// returns, then {"event": "summary", ...}.  kafkajs's own log goes to stderr.  Exits 0 on
// success; on failure prints {"event": "error", "step", "name", "message", "type"} and exits 1.
'use strict'

const { Kafka, logLevel, ConfigResourceTypes } = require('kafkajs')

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields || {})) + '\n')
}

function logCreator() {
  return ({ namespace, label, log }) => {
    process.stderr.write(JSON.stringify({ level: label, namespace, message: log.message, error: log.error }) + '\n')
  }
}

let step = 'connect'

async function main() {
  const args = JSON.parse(process.argv[2] || '{}')
  const kafka = new Kafka({
    clientId: 'kafkajs-admin-peer',
    brokers: args.brokers,
    logLevel: logLevel.WARN,
    logCreator,
    connectionTimeout: 3000,
    requestTimeout: 10000,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2000 },
  })
  const { topic } = args
  const admin = kafka.admin()
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await admin.connect()
  const summary = { topic }
  try {
    step = 'createTopics'
    summary.created = await admin.createTopics({
      topics: [{ topic, numPartitions: args.partitions }], waitForLeaders: true,
    })
    emit('step', { step, result: summary.created })

    step = 'describeCluster'
    const { brokers, controller } = await admin.describeCluster()
    const brokerId = String(brokers[0].nodeId)
    emit('step', { step, brokers: brokers.map(b => b.nodeId), controller })

    step = 'describeConfigs'
    const described = await admin.describeConfigs({
      resources: [
        { type: ConfigResourceTypes.TOPIC, name: topic },
        { type: ConfigResourceTypes.BROKER, name: brokerId },
      ],
      includeSynonyms: false,
    })
    const configsOf = type => {
      const r = described.resources.find(x => x.resourceType === type)
      if (!r) throw new Error(`describeConfigs answered no resource of type ${type}`)
      if (r.errorCode) throw new Error(`describeConfigs ${r.resourceName}: error ${r.errorCode} ${r.errorMessage}`)
      const out = {}
      for (const e of r.configEntries) out[e.configName] = e.configValue
      return { name: r.resourceName, configs: out }
    }
    summary.topicConfigs = configsOf(ConfigResourceTypes.TOPIC)
    summary.brokerConfigs = configsOf(ConfigResourceTypes.BROKER)
    emit('step', { step, topicNames: Object.keys(summary.topicConfigs.configs).length,
                   brokerNames: Object.keys(summary.brokerConfigs.configs).length })

    step = 'alterConfigs'
    const altered = await admin.alterConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
                    configEntries: [{ name: 'retention.ms', value: args.retentionMs }] }],
      validateOnly: false,
    })
    summary.altered = altered.resources.map(r => ({ errorCode: r.errorCode, resourceName: r.resourceName }))
    emit('step', { step, result: summary.altered })

    step = 'describeConfigs(retention.ms)'
    const readBack = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['retention.ms'] }],
      includeSynonyms: false,
    })
    const [entry] = readBack.resources[0].configEntries
    summary.retentionMs = entry ? {
      name: entry.configName, value: entry.configValue, isDefault: entry.isDefault,
      configSource: entry.configSource === undefined ? null : entry.configSource,
    } : null
    summary.retentionEntries = readBack.resources[0].configEntries.length
    emit('step', { step, result: summary.retentionMs })

    step = 'createPartitions'
    summary.grown = await admin.createPartitions({ topicPartitions: [{ topic, count: args.grownTo }] })
    emit('step', { step, result: summary.grown === undefined ? null : summary.grown })

    // Metadata is eventually consistent across brokers, as in Kafka: createPartitions returns
    // once the broker that took it has the new partitions, and fetchTopicMetadata may ask the
    // other broker, which learns them from ZooKeeper a moment later.  So ask again (deadline 15 s).
    step = 'fetchTopicMetadata'
    let meta
    const deadline = Date.now() + 15000
    for (summary.metadataAttempts = 1; ; summary.metadataAttempts++) {
      ;[meta] = (await admin.fetchTopicMetadata({ topics: [topic] })).topics
      if (meta.partitions.length >= args.grownTo || Date.now() > deadline) break
      await new Promise(resolve => setTimeout(resolve, 100))
    }
    summary.partitions = meta.partitions
      .map(p => ({ partition: p.partitionId, leader: p.leader, errorCode: p.partitionErrorCode }))
      .sort((a, b) => a.partition - b.partition)
    emit('step', { step, partitions: summary.partitions.length })

    step = 'produce'
    await producer.connect()
    const messages = []
    for (let i = 0; i < args.records; i++) messages.push({ partition: 0, value: `${topic}-0-${i}` })
    const sent = await producer.send({ topic, messages, acks: -1 })
    summary.produced = sent.map(r => ({
      partition: r.partition, baseOffset: Number(r.baseOffset), errorCode: r.errorCode,
    }))
    emit('step', { step, result: summary.produced })

    step = 'fetchTopicOffsets(before)'
    summary.offsetsBefore = (await admin.fetchTopicOffsets(topic))
      .map(p => ({ partition: p.partition, low: Number(p.low), high: Number(p.high) }))
      .sort((a, b) => a.partition - b.partition)
    emit('step', { step, result: summary.offsetsBefore })

    step = 'deleteTopicRecords'
    await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: String(args.deleteBefore) }] })
    emit('step', { step })

    step = 'fetchTopicOffsets(after)'
    summary.offsetsAfter = (await admin.fetchTopicOffsets(topic))
      .map(p => ({ partition: p.partition, low: Number(p.low), high: Number(p.high) }))
      .sort((a, b) => a.partition - b.partition)
    emit('step', { step, result: summary.offsetsAfter })

    step = 'fetchTopicOffsetsByTimestamp'
    summary.offsetsByTimestamp = (await admin.fetchTopicOffsetsByTimestamp(topic, 0))
      .map(p => ({ partition: p.partition, offset: Number(p.offset) }))
      .sort((a, b) => a.partition - b.partition)
    emit('step', { step, result: summary.offsetsByTimestamp })

    emit('summary', summary)
  } finally {
    await producer.disconnect()
    await admin.disconnect()
  }
}

main().then(
  () => process.exit(0),
  error => {
    emit('error', { step, name: error.name, message: error.message, type: error.type || null })
    process.exit(1)
  }
)
