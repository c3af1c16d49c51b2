#!/usr/bin/env python3
"""Writes alerts/tests/namespaces.test.yml: every alert in two deployments
that differ only by namespace (same pod, server, account, instance names).

Each alert has one scenario below; the expected alerts are what promtool
reports for them, so read the diff after running it: every alert must come
out twice, once with each namespace. Run from anywhere:
    python3 scripts/alert-namespace-test.py
Needs promtool and PyYAML.
"""
import re, subprocess, sys, yaml, tempfile, os
E='job="nats-delivery-exporter",instance="10.0.0.5:7777",pod="nats-0"'
A='job="orders-app",instance="10.0.0.9:9464",pod="orders-0"'
C='account="$G",stream="ORDERS",consumer="worker"'
S='account="$G",stream="ORDERS"'
def up(lbl, v='1x40'): return (f'up{{{lbl}}}', v)
R='0x4 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30'
scen = {
 'NatsDeliveryExporterDown': ([up(E,'0x10')], '5m'),
 'NatsDeliveryTargetDown': ([(f'nats_delivery_up{{{E},server="nats-0",source="jsz"}}','0x10')], '5m'),
 'NatsDeliveryAdvisoryListenerDown': ([(f'nats_delivery_advisory_listener_up{{{E},account="$G"}}','0x10')], '5m'),
 'NatsDeliverySystemEventsListenerDown': ([(f'nats_delivery_system_events_listener_up{{{E}}}','0x10')], '5m'),
 'NatsDeliveryAppReportsListenerDown': ([(f'nats_delivery_app_reports_listener_up{{{E}}}','0x10')], '5m'),
 'NatsDeliveryAdvisoriesUnwatched': ([(f'nats_delivery_advisory_listener_up{{{E},account="OPS"}}','1x30'),
     (f'nats_delivery_consumer_pending_messages{{{E},{C}}}','0x30')], '20m'),
 'NatsDeliveryExporterDroppedMessages': ([up(E), (f'nats_delivery_exporter_dropped_messages_total{{{E},account="$G"}}','0x5 3x20')], '8m'),
 'NatsDeliveryAdvisoriesMalformed': ([(f'nats_delivery_advisories_malformed_total{{{E},account="$G"}}','0x5 2x20')], '8m'),
 'NatsDeliveryJetStreamSeriesCeilingReached': ([(f'nats_delivery_jetstream_series_wanted{{{E}}}','200x30'),(f'nats_delivery_jetstream_series_limit{{{E}}}','100x30')], '20m'),
 'NatsDeliverySurveyServerMissing': ([(f'nats_delivery_survey_server_answered{{{E},server="nats-1"}}','0x10'),(f'nats_delivery_survey_up{{{E}}}','1x10')], '5m'),
 'NatsDeliverySurveyDown': ([(f'nats_delivery_survey_up{{{E}}}','0x10')], '5m'),
 'NatsClientDroppedMessages': ([up(A), (f'nats_delivery_client_dropped_messages_total{{{A},client="orders",subscription="orders.>"}}','0x5 4x20')], '8m'),
 'NatsClientLibraryDroppedMessages': ([up(A), (f'nats_delivery_client_slow_consumer_events_total{{{A},client="orders",subscription="orders.>"}}','0x5 4x20')], '8m'),
 'NatsJetStreamApiRequestsDropped': ([(f'nats_delivery_jetstream_api_requests_dropped_total{{{E},server="nats-0"}}','0x5 1x20')], '8m'),
 'NatsServerSlowConsumerCut': ([(f'nats_delivery_server_slow_consumers_total{{{E},server="nats-0"}}','0x5 1x20')], '8m'),
 'NatsJetStreamMaxDeliveriesExceeded': ([up(E), (f'nats_delivery_jetstream_max_deliveries_total{{{E},{C}}}','0x5 1x20')], '8m'),
 'NatsJetStreamUnackedMessagesDeleted': ([up(E), (f'nats_delivery_jetstream_terminated_total{{{E},{C},reason="stream_limits"}}','0x5 1x20')], '8m'),
 'NatsJetStreamMessagesRemovedBeforeDelivery': ([(f'nats_delivery_consumer_removed_before_delivery_messages_total{{{E},{C}}}','0x5 7x20')], '8m'),
 'NatsJetStreamOriginMessagesRemovedBeforeCopy': ([(f'nats_delivery_stream_origin_removed_before_copy_messages_total{{{E},{S},kind="mirror",origin_stream="SRC",origin_api=""}}','0x5 7x20')], '8m'),
 'NatsJetStreamPublishRefused': ([up(A), (f'nats_delivery_client_jetstream_publish_failures_total{{{A},client="orders",reason="max_bytes"}}','0x5 2x20')], '8m'),
 'NatsDeliveryLossSustained': ([(f'nats_delivery_server_slow_consumers_total{{{E},server="nats-0"}}',R)], '30m'),
 'NatsConnectionNearMaxPending': ([(f'nats_delivery_connection_pending_ratio{{{E},server="nats-0",account="$G",client_name="orders",cid="7"}}','0.6x10')], '5m'),
 'NatsProducerStallsRising': ([(f'nats_delivery_server_stalled_clients_total{{{E},server="nats-0"}}',R)], '30m'),
 'NatsJetStreamConsumerSaturated': ([(f'nats_delivery_consumer_ack_pending_messages{{{E},{C}}}','100x20'),(f'nats_delivery_consumer_max_ack_pending{{{E},{C}}}','100x20')], '10m'),
 'NatsJetStreamConsumerStuck': ([(f'nats_delivery_consumer_pending_messages{{{E},{C}}}','10x30'),(f'nats_delivery_consumer_delivered_stream_sequence{{{E},{C}}}','42x30')], '25m'),
 'NatsJetStreamConsumerStopped': ([(f'nats_delivery_consumer_status{{{E},{C},status="stopped"}}','1x20')], '10m'),
 'NatsJetStreamConsumerStalled': ([(f'nats_delivery_consumer_status{{{E},{C},status="stalled"}}','1x20')], '10m'),
 'NatsJetStreamOriginInactive': ([(f'nats_delivery_stream_origin_contact_age_seconds{{{E},{S},kind="mirror",origin_stream="SRC",origin_api=""}}','300x20')], '10m'),
 'NatsJetStreamOriginLagHigh': ([(f'nats_delivery_stream_origin_lag_messages{{{E},{S},kind="mirror",origin_stream="SRC",origin_api=""}}','20000x30')], '20m'),
 'NatsJetStreamConsumerDeliveryLagHigh': ([(f'nats_delivery_consumer_delivery_lag_seconds{{{E},{C}}}','600x20')], '10m'),
 'NatsJetStreamRemovalForecast': ([(f'nats_delivery_consumer_removal_forecast_seconds{{{E},{C}}}','600x20')], '10m'),
 'NatsJetStreamOriginRemovalForecast': ([(f'nats_delivery_stream_origin_removal_forecast_seconds{{{E},{S},kind="mirror",origin_stream="SRC",origin_api=""}}','600x20')], '10m'),
 'NatsJetStreamAccountFullForecast': ([(f'nats_delivery_account_jetstream_full_forecast_seconds{{{E},server="nats-0",account="$G",storage="file"}}','600x20')], '10m'),
 'NatsJetStreamAccountNearlyFull': ([(f'nats_delivery_account_jetstream_used_bytes{{{E},server="nats-0",account="$G",storage="file"}}','95x20'),(f'nats_delivery_account_jetstream_limit_bytes{{{E},server="nats-0",account="$G",storage="file"}}','100x20')], '20m'),
 'NatsJetStreamReplicaMarginExhausted': ([(f'nats_delivery_stream_replica_margin{{{E},{S}}}','0x20'),(f'nats_delivery_stream_replicas{{{E},{S}}}','3x20')], '10m'),
 'NatsJetStreamTwoReplicas': ([(f'nats_delivery_stream_replicas{{{E},{S}}}','2x20')], '10m'),
 'NatsJetStreamReplicasUnavailable': ([(f'nats_delivery_stream_replica_margin{{{E},{S}}}','-1x20'),(f'nats_delivery_stream_replicas{{{E},{S}}}','3x20')], '10m'),
 'NatsRouteNearMaxPending': ([(f'nats_delivery_route_pending_ratio{{{E},server="nats-0",remote="nats-1",rid="5"}}','0.6x10')], '5m'),
 'NatsGatewayNearMaxPending': ([(f'nats_delivery_gateway_pending_ratio{{{E},server="nats-0",gateway="B",direction="outbound",cid="11"}}','0.6x10')], '5m'),
 'NatsJetStreamStreamDataLost': ([(f'nats_delivery_stream_lost_messages{{{E},{S}}}','5x10')], '5m'),
 'NatsDeliveryCanaryDown': ([(f'nats_delivery_canary_up{{{E},account="$G"}}','0x10')], '6m'),
 'NatsDeliveryCanaryLoss': ([(f'nats_delivery_canary_lost_messages_total{{{E},account="$G"}}','0x5 4x20')], '8m'),
}
NS=['nats-a','nats-b']
def series(lbls, ns): return lbls.replace('{', '{namespace="%s",' % ns, 1)
def doc(exp):
    tests=[]
    for name,(ser,t) in scen.items():
        inp=[{'series':series(s,ns),'values':v} for ns in NS for s,v in ser]
        tests.append({'interval':'1m','input_series':inp,'alert_rule_test':[{'eval_time':t,'alertname':name,'exp_alerts':exp.get(name,[])}]})
    return {'rule_files':['../exporter.rules.yml','../loss.rules.yml','../pressure.rules.yml','../opt-in.rules.yml'],'evaluation_interval':'1m','tests':tests}
out=os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','alerts','tests','namespaces.test.yml')
HEAD=open(out).read().split('rule_files:')[0] if os.path.exists(out) else ''
def unq(s): return bytes(s,'utf-8').decode('unicode_escape').encode('latin-1').decode('utf-8')
def kv(s): return {k:unq(v) for k,v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"',s)}
yaml.safe_dump(doc({}),open(out,'w'),sort_keys=False,width=1000)
r=subprocess.run(['promtool','test','rules',out],capture_output=True,text=True,cwd=os.path.dirname(out))
exp={}
for block in re.split(r'\n\s*alertname: ',r.stdout+r.stderr)[1:]:
    name=block.split(',')[0]
    got=block.split('got:',1)[1]
    alerts=[]
    for l,a in re.findall(r'Labels:\{(.*?)\}\s*\n\s*Annotations:\{(.*?)\},?\s*\n',got):
        lab=kv(l); lab.pop('alertname')
        alerts.append({'exp_labels':lab,'exp_annotations':kv(a)})
    exp[name]=alerts
open(out,'w').write(HEAD+yaml.safe_dump(doc(exp),sort_keys=False,width=1000,allow_unicode=True))
for n in scen:
    print(n, [a['exp_labels'].get('namespace') for a in exp.get(n,[])])
